"""A stock MCPServer with no telemetry code, run as a subprocess under `opentelemetry-instrument`.

Writes are gated inside the server so a test can order a race through the
protocol itself: `wait_started` returns once a write has begun, `release` lets
it finish. Usage: python gated_server.py VAULT_DIR [stdio | streamable-http PORT | sse PORT]
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer

vault = Path(sys.argv[1])
server = MCPServer("gated-notes")
started = anyio.Event()
release_async = anyio.Event()
release_thread = threading.Event()


@server.tool()
def echo(text: str) -> str:
    return text


@server.tool()
def broken(text: str) -> str:
    raise ValueError("the tool failed")


@server.tool()
async def slow(text: str) -> str:
    started.set()
    await release_async.wait()
    return text


@server.tool()
async def shielded_write(name: str) -> str:
    started.set()
    with anyio.CancelScope(shield=True):  # a commit is never left half-done
        await release_async.wait()
        (vault / name).write_text("written")
    return f"wrote {name}"


@server.tool()
def sync_write(name: str) -> str:
    anyio.from_thread.run_sync(started.set)
    release_thread.wait(60)
    (vault / name).write_text("written")
    return f"wrote {name}"


@server.tool()
async def wait_started() -> str:
    await started.wait()
    return "started"


@server.tool()
def release() -> str:
    release_async.set()
    release_thread.set()
    return "released"


if __name__ == "__main__":
    transport = sys.argv[2] if len(sys.argv) > 2 else "stdio"
    if transport == "stdio":
        server.run()
    else:
        server.run(transport, host="127.0.0.1", port=int(sys.argv[3]))
