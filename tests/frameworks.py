"""The server frameworks the outcome contract is tested against, as one test parameter.

- `sdk`: the SDK's own high-level server (MCPServer on mcp 2.x, the bundled FastMCP on 1.x);
- `lowlevel`: the SDK's low-level `Server`, with the handlers an application writes by hand
  (tests/lowlevel_framework.py);
- `fastmcp`: standalone FastMCP (PyPI `fastmcp` or `fastmcp-slim`), when installed (CI has an environment
  for each end of each FastMCP line it supports).
All serve through the SDK's low-level server; the tests drive them over the same wire with the same
assertions. FastMCP 3.x/4.x write their own details on our span: tests compare our attributes exactly,
and FastMCP's separately (tests/test_fastmcp.py).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.lowlevel_framework import LowLevelApp
from tests.support import MCP_MAJOR

try:
    from mcp.server.mcpserver import MCPServer as SdkServer
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as SdkServer



def fastmcp_version() -> str | None:
    """The version of the importable `fastmcp` package, whichever distribution provides it (`fastmcp`, or
    `fastmcp-slim`, which `fastmcp` 4.x is a meta-package over); None when it is not installed."""
    if importlib.util.find_spec("fastmcp") is None:
        return None
    (distribution, *_) = importlib.metadata.packages_distributions()["fastmcp"]
    return importlib.metadata.version(distribution)


FASTMCP_VERSION = fastmcp_version()
FASTMCP_MAJOR = None if FASTMCP_VERSION is None else int(FASTMCP_VERSION.split(".")[0])


@dataclass(frozen=True)
class Framework:
    name: str
    make: Callable[[str], Any]  # a server, by name
    writes_on_our_span: bool  # FastMCP 3.x/4.x: its attributes and exception events land on our span
    sync_tools_in_thread: bool  # else on the event loop: nothing runs, not even the test, until they return

    def __repr__(self) -> str:
        return self.name

    def our_attributes(self, span: Any) -> dict[str, Any]:
        return {key: value for key, value in span.attributes.items() if not self.is_its_own(key)}

    def its_attributes(self, span: Any) -> dict[str, Any]:
        return {key: value for key, value in span.attributes.items() if self.is_its_own(key)}

    def is_its_own(self, key: str) -> bool:
        return self.writes_on_our_span and (key.startswith(("fastmcp.", "enduser.")) or key == "mcp.session.id")

    def our_events(self, span: Any) -> list[tuple[str, dict[str, Any]]]:
        """The span's events but the exceptions a framework recorded on it."""
        return [(event.name, dict(event.attributes)) for event in span.events if event.name != "exception"]


SDK = Framework("sdk", SdkServer, writes_on_our_span=False, sync_tools_in_thread=MCP_MAJOR == 2)
LOWLEVEL = Framework("lowlevel", LowLevelApp, writes_on_our_span=False, sync_tools_in_thread=True)
FRAMEWORKS = [SDK, LOWLEVEL]
if FASTMCP_MAJOR is not None:
    from fastmcp import FastMCP

    FRAMEWORKS.append(
        Framework("fastmcp", FastMCP, writes_on_our_span=FASTMCP_MAJOR >= 3, sync_tools_in_thread=FASTMCP_MAJOR >= 3)
    )
