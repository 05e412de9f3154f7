"""The race harnesses' server: one tool, `work`, that records ground truth when its side effect is done.

`work(key, micros, shielded, fail)` sleeps `micros`, then records `key` as finished (its side effect),
then returns `key`, or raises (an isError result) when `fail`. A shielded call is a commit that, once
started, completes whatever the caller does; an unshielded one stops where the cancel finds it.

In-process: `race_server(on_finished)`. As a script, the same server over stdio, appending each
finished key as a line to FINISHED_FILE: python race_server.py FINISHED_FILE
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import anyio

try:
    from mcp.server.mcpserver import MCPServer as HighLevelServer
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as HighLevelServer


def race_server(on_finished: Callable[[str], None]) -> HighLevelServer:
    server = HighLevelServer("race")

    @server.tool()
    async def work(key: str, micros: int, shielded: bool, fail: bool = False) -> str:
        if shielded:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(micros / 1e6)
                on_finished(key)
        else:
            await anyio.sleep(micros / 1e6)
            on_finished(key)
        if fail:
            raise ValueError(f"work {key} failed after its side effect")
        return key

    return server


if __name__ == "__main__":
    with open(sys.argv[1], "a", buffering=1) as finished:  # line-buffered: each key is on disk when recorded
        race_server(lambda key: finished.write(f"{key}\n")).run()
