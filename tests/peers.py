"""A raw JSON-RPC peer for a real MCP server over memory streams.

It sends exactly the messages a test chooses (including hostile ones) and
records every message the server writes, so tests can assert what reached the
wire: one answer per id, or none at all for a cancelled request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

PROTOCOL_VERSION = "2025-11-25"


class RawPeer:
    def __init__(self, read_stream: Any, write_stream: Any) -> None:
        self._read = read_stream
        self._write = write_stream
        self.wire: list[JSONRPCResponse | JSONRPCError | JSONRPCNotification | JSONRPCRequest] = []
        self._arrived = anyio.Event()

    async def pump(self) -> None:
        async for item in self._read:
            if isinstance(item, SessionMessage):
                self.wire.append(item.message)
                self._arrived.set()
                self._arrived = anyio.Event()

    async def request(self, request_id: Any, method: str, params: dict[str, Any] | None = None) -> None:
        request = JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method, params=params)
        await self._write.send(SessionMessage(request))

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._write.send(SessionMessage(JSONRPCNotification(jsonrpc="2.0", method=method, params=params)))

    async def cancel(self, request_id: Any, reason: str | None = None) -> None:
        params: dict[str, Any] = {"requestId": request_id}
        if reason is not None:
            params["reason"] = reason
        await self.notify("notifications/cancelled", params)

    def answers(self, request_id: Any) -> list[JSONRPCResponse | JSONRPCError]:
        return [m for m in self.wire if isinstance(m, JSONRPCResponse | JSONRPCError) and m.id == request_id]

    async def answer(self, request_id: Any) -> JSONRPCResponse | JSONRPCError:
        with anyio.fail_after(10):
            while not self.answers(request_id):
                await self._arrived.wait()
        return self.answers(request_id)[0]

    async def call(self, request_id: Any, method: str, params: dict[str, Any] | None = None) -> Any:
        await self.request(request_id, method, params)
        return await self.answer(request_id)

    async def barrier(self, request_id: Any) -> None:
        """Returns once the server has read every message sent before it (the read loop is ordered)."""
        await self.call(request_id, "ping")

    async def initialize(self) -> None:
        await self.call(
            "init",
            "initialize",
            {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
        )
        await self.notify("notifications/initialized")


@asynccontextmanager
async def raw_session(server: MCPServer | Server) -> AsyncIterator[RawPeer]:
    lowlevel = server._lowlevel_server if isinstance(server, MCPServer) else server
    async with create_client_server_memory_streams() as ((client_read, client_write), (server_read, server_write)):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lowlevel.run, server_read, server_write, lowlevel.create_initialization_options())
            peer = RawPeer(client_read, client_write)
            tg.start_soon(peer.pump)
            await peer.initialize()
            yield peer
            tg.cancel_scope.cancel()


async def until(condition: Callable[[], bool], seconds: float = 10) -> None:
    """Wait for a condition another task or thread will make true; fail, never pass, on the deadline."""
    with anyio.fail_after(seconds):
        while not condition():
            await anyio.sleep(0.001)


async def cancel_when(
    trigger: Callable[[], Awaitable[Any]],
    call: Callable[[], Awaitable[Any]],
    then: Callable[[], None] = lambda: None,
) -> Any:
    """Run `call()` as a caller would, cancel it the moment `trigger()` returns, then run `then()`.

    Returns what `call()` returned, or None if the cancel stopped it.
    """
    returned: list[Any] = []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def cancel() -> None:
                await trigger()
                scope.cancel()
                then()

            tg.start_soon(cancel)
            returned.append(await call())
    return returned[0] if returned else None
