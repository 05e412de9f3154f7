"""Servers and peers in the test's own process, over the transports users run: streamable HTTP and SSE served by
uvicorn on 127.0.0.1, stdio over a pair of pipes with a peer speaking JSON lines, and a stdio server process that
answers without importing mcp (fast to start)."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from tests.subprocess_servers import free_port
from tests.support import MCP_MAJOR

PROTOCOL_VERSION = "2025-06-18"


@asynccontextmanager
async def served_over_http(app: Any, path: str) -> AsyncIterator[str]:
    """`app` served by uvicorn, its lifespan run; yields the URL of `path`."""
    import uvicorn

    port = free_port()
    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="on"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(web.serve)
        with anyio.fail_after(20):
            while not web.started:
                await anyio.sleep(0.01)
        yield f"http://127.0.0.1:{port}{path}"
        web.should_exit = True


def http_app(server: Any, *, stateless: bool = False, sse: bool = False) -> Any:
    """The SDK's high-level server's ASGI app: streamable HTTP (stateful or not), or SSE."""
    if sse:
        return server.sse_app()
    if MCP_MAJOR == 2:
        return server.streamable_http_app(stateless_http=stateless)
    server.settings.stateless_http = stateless
    return server.streamable_http_app()


class LinePeer:
    """A peer speaking JSON-RPC lines over a pair of async text files."""

    def __init__(self, reader: Any, writer: Any) -> None:
        self._reader, self._writer = reader, writer

    async def send(self, message: dict[str, Any]) -> None:
        await self._writer.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        await self._writer.flush()

    async def answer(self, request_id: Any) -> dict[str, Any]:
        with anyio.fail_after(10):
            while True:
                line = await self._reader.readline()
                assert line, "the stream ended without an answer"
                message = json.loads(line)
                if message.get("id") == request_id and "method" not in message:
                    return message

    async def call(self, request_id: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
        await self.send({"id": request_id, "method": method, "params": params})
        return await self.answer(request_id)

    async def initialize(self) -> None:
        await self.call("init", "initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                               "clientInfo": {"name": "lines", "version": "0"}})
        await self.send({"method": "notifications/initialized"})

    async def close(self) -> None:
        await self._writer.aclose()


@asynccontextmanager
async def served_over_pipes(stdio_server: Callable[..., Any], lowlevel: Any) -> AsyncIterator[LinePeer]:
    """`lowlevel` served through `stdio_server` (a binding of the SDK's) on a pair of pipes, this process's
    stdin and stdout untouched; yields the initialized peer at their other ends."""
    to_server_read, to_server_write = os.pipe()
    to_peer_read, to_peer_write = os.pipe()
    server_in = anyio.wrap_file(io.TextIOWrapper(os.fdopen(to_server_read, "rb"), encoding="utf-8"))
    server_out = anyio.wrap_file(io.TextIOWrapper(os.fdopen(to_peer_write, "wb"), encoding="utf-8",
                                                  write_through=True))
    peer_in = anyio.wrap_file(io.TextIOWrapper(os.fdopen(to_peer_read, "rb"), encoding="utf-8"))
    peer_out = anyio.wrap_file(io.TextIOWrapper(os.fdopen(to_server_write, "wb"), encoding="utf-8",
                                                write_through=True))
    async with anyio.create_task_group() as tg:

        async def serve() -> None:
            async with stdio_server(stdin=server_in, stdout=server_out) as (read, write):
                await lowlevel.run(read, write, lowlevel.create_initialization_options())

        tg.start_soon(serve)
        peer = LinePeer(peer_in, peer_out)
        try:
            await peer.initialize()
            yield peer
        finally:
            await peer.close()  # the server reads the end of its stdin: its session ends
    for file in (server_in, server_out, peer_in):
        await file.aclose()


# A stdio server that answers initialize and any tools/call with its arguments' text, in plain Python: it starts in
# milliseconds, so a test can start one per client helper.
LINE_SERVER = r"""
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    if message["method"] == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "lines", "version": "0"}}
    elif message["method"] == "tools/list":
        result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
    elif message["method"] != "tools/call":
        result = {}
    else:
        text = message.get("params", {}).get("arguments", {}).get("text", "")
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()
"""


def line_server_parameters() -> Any:
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=sys.executable, args=["-c", LINE_SERVER])
