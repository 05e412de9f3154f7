"""The server `benchmarks/truth.py` loads: streamable HTTP under uvicorn, on either mcp line, with no telemetry
code of its own. Its tools keep ground truth outside the plugin: every handler appends to a log as it begins
(with the span it runs in, the only link from a call to its span) and as it ends, and a write's row goes into
SQLite before it returns.

    python truth_server.py DIRECTORY PORT

`write` waits `delay` seconds (interruptible), then commits its row; `shielded` commits inside a shield (a cancel
cannot stop it); `broken` raises (an isError result). DIRECTORY gets `handlers.log` and `rows.db`.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
from pathlib import Path

import anyio
from opentelemetry import trace

directory, port = Path(sys.argv[1]), int(sys.argv[2])
for chatty in ("uvicorn", "mcp"):  # a line a request or a session, exported as logs: the WARNINGs are what counts
    logging.getLogger(chatty).setLevel(logging.WARNING)
try:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("truth")
    network = {"host": "127.0.0.1", "port": port}
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP

    server = FastMCP("truth", host="127.0.0.1", port=port)
    network = {}

_log = os.open(directory / "handlers.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
_rows = sqlite3.connect(directory / "rows.db", isolation_level=None, check_same_thread=False)
_rows.execute("create table if not exists rows (key text)")
WRITES = {"destructiveHint": True}


def log(*fields: str) -> None:
    os.write(_log, (" ".join(fields) + "\n").encode())  # one write, appended whole


def began(key: str) -> None:
    context = trace.get_current_span().get_span_context()
    log("began", key, format(context.span_id, "016x"))


def commit(key: str) -> str:
    _rows.execute("insert into rows values (?)", (key,))
    log("ended", key)
    return key


@server.tool(annotations=WRITES)
async def write(key: str, delay: float) -> str:
    began(key)
    await anyio.sleep(delay)
    return commit(key)


@server.tool(annotations=WRITES)
async def shielded(key: str, delay: float) -> str:
    began(key)
    with anyio.CancelScope(shield=True):
        await anyio.sleep(delay)
        return commit(key)


@server.tool()
async def broken(key: str) -> str:
    began(key)
    log("ended", key)
    raise ValueError("the tool failed")


if __name__ == "__main__":
    server.run("streamable-http", **network)
