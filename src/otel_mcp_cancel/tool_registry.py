"""Which methods a server serves, which tools it has registered, and the annotations it declared for them.

Read from data the server already holds, never by calling the application: a framework's tool
(MCPServer, the SDK's FastMCP) tells its registration and annotations where it runs (see
`hooks.framework.FrameworkHooks.tool_run`); for any server, its own tools/list answers name the tools it
advertised. A low-level server's schema callback (`get_tool_input_schema`) is the application's code,
may be slow or raise, and is never called. Unregistered names fold to _OTHER; annotations give a ghost its risk.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import Any

# A server's own listing is trusted, but a cap keeps a runaway listing from growing memory.
MAX_LISTED_NAMES = 10_000

_listed: weakref.WeakKeyDictionary[Any, dict[str, Mapping[str, Any] | None]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def reset() -> None:
    """Forget every listing learned (uninstrument() ran)."""
    with _lock:
        _listed.clear()


def learn_listing(server: Any, result: Any) -> None:
    """Remember the tools a server's tools/list answer (the wire dict) advertised, with their annotations."""
    tools = result.get("tools") if isinstance(result, Mapping) else None
    if isinstance(tools, list):
        learn(server, [(tool.get("name"), tool.get("annotations")) for tool in tools if isinstance(tool, Mapping)])


def learn(server: Any, tools: list[tuple[Any, Any]]) -> None:
    """Remember (name, annotations as a camelCase mapping or None) pairs a server listed."""
    with _lock:
        known = _listed.setdefault(server, {})
        for name, annotations in tools:
            if isinstance(name, str) and (name in known or len(known) < MAX_LISTED_NAMES):
                known[name] = annotations if isinstance(annotations, Mapping) else None


def serves_method(handlers: object, method: str) -> bool:
    """Whether a server's handler table (a dict the SDK keeps) has a method outside the protocol's list (an mcp
    2.x extension's, such as tasks/*)."""
    return isinstance(handlers, Mapping) and method in handlers


def is_registered(server: Any, name: str | None) -> bool:
    if name is None:
        return False
    with _lock:
        return name in _listed.get(server, {})


def listed_annotations(server: Any, name: str | None) -> Mapping[str, Any] | None:
    with _lock:
        return _listed.get(server, {}).get(name) if name is not None else None
