"""The race harnesses' server: one tool, `work`, that records ground truth when its side effect is done.

`work(key, micros, shielded, fail, gated, blocking)` sleeps `micros` (or, when `gated`, holds at its gate until
the test opens it; when also `blocking`, with its event loop blocked, as a server doing synchronous work inside an
`async` tool), then records `key` as finished (its side effect), then returns `key`, or raises (an
isError result) when `fail`. A shielded call is a commit that, once started, completes whatever the
caller does; an unshielded one stops where the cancel finds it.

A gate is a pair of files, so a test holds a handler the same way in-process and across processes:
the held handler creates `<key>.started` once its work has begun (inside the shield, if shielded) and
waits for `<key>.open`. A test cancels between the two: that is "mid-work" by construction, not by timing.

In-process: `race_server(on_finished, gates, make)`. As a script, the same server over stdio, appending
each finished key as a line to FINISHED_FILE: python race_server.py FINISHED_FILE GATES_DIR; standalone
FastMCP's or the low-level app's when RACE_FRAMEWORK is `fastmcp` or `lowlevel`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

try:
    from mcp.server.mcpserver import MCPServer as SdkServer
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as SdkServer


class Gates:
    """Handlers held mid-work until the test lets them go, through files in one directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    async def hold(self, key: str) -> None:
        """In the handler: say the work has begun, then wait for the test to open the gate."""
        (self.directory / f"{key}.started").touch()
        gate = self.directory / f"{key}.open"
        while not gate.exists():
            await anyio.sleep(0.001)

    def hold_blocking(self, key: str) -> None:
        """As `hold`, blocking the event loop meanwhile: synchronous work inside an `async` tool, as published
        servers do (sqlite, a subprocess). The server reads nothing until the gate opens."""
        (self.directory / f"{key}.started").touch()
        gate = self.directory / f"{key}.open"
        while not gate.exists():
            time.sleep(0.001)

    def started(self, key: str) -> bool:
        """In the test: whether the handler of `key` is held at its gate."""
        return (self.directory / f"{key}.started").exists()

    def open(self, key: str) -> None:
        (self.directory / f"{key}.open").touch()


def race_server(on_finished: Callable[[str], None], gates: Gates, make: Callable[[str], Any] = SdkServer) -> Any:
    """`make` builds the server by name: the SDK's high-level server, or standalone FastMCP's."""
    server = make("race")

    async def side_effect(key: str, micros: int, gated: bool, blocking: bool) -> None:
        if gated and blocking:
            gates.hold_blocking(key)
        elif gated:
            await gates.hold(key)
        else:
            await anyio.sleep(micros / 1e6)
        on_finished(key)

    @server.tool()
    async def work(key: str, micros: int, shielded: bool, fail: bool = False, gated: bool = False,
                   blocking: bool = False) -> str:
        if shielded:
            with anyio.CancelScope(shield=True):
                await side_effect(key, micros, gated, blocking)
        else:
            await side_effect(key, micros, gated, blocking)
        if fail:
            raise ValueError(f"work {key} failed after its side effect")
        return key

    return server


if __name__ == "__main__":
    make: Callable[[str], Any] = SdkServer
    framework = os.environ.get("RACE_FRAMEWORK", "sdk")
    if framework == "fastmcp":
        from fastmcp import FastMCP as make
    elif framework == "lowlevel":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: `tests` is not on the path
        from tests.lowlevel_framework import LowLevelApp as make
    elif framework != "sdk":
        raise SystemExit(f"unknown RACE_FRAMEWORK {framework!r}")
    with open(sys.argv[1], "a", buffering=1) as finished:  # line-buffered: each key is on disk when recorded
        race_server(lambda key: finished.write(f"{key}\n"), Gates(Path(sys.argv[2])), make).run()
