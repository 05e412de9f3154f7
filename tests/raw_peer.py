"""A raw JSON-RPC peer for a real MCP server (either SDK line) over memory streams.

It sends exactly the messages a test chooses (including hostile ones) and
records every message the server writes, so tests can assert what reached the
wire: one answer per id, the 1.x cancel acknowledgement, or nothing at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

import anyio
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.message import SessionMessage

from tests.support import until

try:  # mcp 2.x
    from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

    def _envelope(message: Any) -> Any:
        return message

    def unwrap(message: Any) -> Any:
        return message

except ImportError:  # mcp 1.x wraps every message in a JSONRPCMessage root model
    from mcp.types import JSONRPCError, JSONRPCMessage, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

    def _envelope(message: Any) -> Any:
        return JSONRPCMessage(message)

    def unwrap(message: Any) -> Any:
        return message.root


REQUESTED_PROTOCOL_VERSION = "2025-06-18"  # known to both lines


class RawPeer:
    def __init__(self, read_stream: Any, write_stream: Any) -> None:
        self.read_stream = read_stream
        self._write = write_stream
        self.wire: list[Any] = []
        self._answers: dict[Any, list[Any]] = {}  # by request id: a long run must not scan the wire
        self.protocol_version: str | None = None
        self.closed = False
        self._reading = anyio.Event()
        self._reading.set()
        self.crashes: list[Exception] = []  # what ended an in-process server's run(), if it died
        self._arrived = anyio.Event()

    async def pump(self) -> None:
        try:
            while True:
                await self._reading.wait()
                item = await self.read_stream.receive()
                if isinstance(item, SessionMessage):
                    message = unwrap(item.message)
                    self.wire.append(message)
                    if isinstance(message, JSONRPCResponse | JSONRPCError):
                        self._answers.setdefault(message.id, []).append(message)
                    self._arrived.set()
                    self._arrived = anyio.Event()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            pass  # the session ended
        self.closed = True
        self._arrived.set()

    def stop_reading(self) -> None:
        """Leave the server's messages unread, so its writes back up and block."""
        self._reading = anyio.Event()

    def resume_reading(self) -> None:
        self._reading.set()

    async def request_with_its_answer_blocked(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        """Send a request and return once the server is blocked writing its answer: this peer stops
        reading, fills the stream's buffer with two pings' answers (the reader may take one more
        message first), then waits on the stream's own counters, not on time."""
        self.stop_reading()
        await self.request(f"fill-{request_id}-1", "ping")
        await self.request(f"fill-{request_id}-2", "ping")
        await until(self.buffer_full)
        already_waiting = self.writers_waiting()
        await self.request(request_id, method, params)
        await until(lambda: self.writers_waiting() == already_waiting + 1)

    def _statistics(self) -> Any:
        # mcp 2.x wraps the memory stream to carry each sender's context along.
        return getattr(self.read_stream, "_inner", self.read_stream).statistics()

    def buffer_full(self) -> bool:
        stats = self._statistics()
        return stats.current_buffer_used == stats.max_buffer_size

    def writers_waiting(self) -> int:
        return self._statistics().tasks_waiting_send

    async def request(self, request_id: Any, method: str, params: dict[str, Any] | None = None) -> None:
        request = JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method, params=params)
        await self._write.send(SessionMessage(_envelope(request)))

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        notification = JSONRPCNotification(jsonrpc="2.0", method=method, params=params)
        await self._write.send(SessionMessage(_envelope(notification)))

    async def cancel(self, request_id: Any, reason: str | None = None) -> None:
        params: dict[str, Any] = {"requestId": request_id}
        if reason is not None:
            params["reason"] = reason
        await self.notify("notifications/cancelled", params)

    def answers(self, request_id: Any) -> list[Any]:
        return list(self._answers.get(request_id, ()))

    async def answer(self, request_id: Any) -> Any:
        with anyio.fail_after(10):
            while not self.answers(request_id):
                assert not self.crashes, f"the server died: {self.crashes!r}"
                assert not self.closed, "the session ended without an answer"
                await self._arrived.wait()
        return self.answers(request_id)[0]

    async def call(self, request_id: Any, method: str, params: dict[str, Any] | None = None) -> Any:
        await self.request(request_id, method, params)
        return await self.answer(request_id)

    async def barrier(self, request_id: Any) -> None:
        """Returns once the server has read every message sent before it (its read loop is ordered)."""
        await self.call(request_id, "ping")

    async def initialize(self) -> None:
        client = {"protocolVersion": REQUESTED_PROTOCOL_VERSION, "capabilities": {}}
        answer = await self.call("init", "initialize", {**client, "clientInfo": {"name": "raw", "version": "0"}})
        self.named = {"mcp.client.name": "raw", "mcp.client.version": "0"}  # on the server's spans from now on
        self.protocol_version = answer.result["protocolVersion"]
        await self.notify("notifications/initialized")


def is_result(message: Any) -> bool:
    return isinstance(message, JSONRPCResponse)


def is_error(message: Any, code: int) -> bool:
    return isinstance(message, JSONRPCError) and message.error.code == code


def lowlevel_of(server: Any) -> Any:
    """The low-level server behind MCPServer (2.x) or FastMCP (1.x), or the server itself."""
    return getattr(server, "_lowlevel_server", None) or getattr(server, "_mcp_server", None) or server


def lifespan_of(server: Any) -> AbstractAsyncContextManager[Any]:
    """Standalone FastMCP's lifespan, which its own runners enter around the low-level server's run()."""
    lifespan = getattr(server, "_lifespan_manager", None)
    return lifespan() if lifespan is not None else nullcontext()


@asynccontextmanager
async def raw_peer_over(read_stream: Any, write_stream: Any) -> AsyncIterator[RawPeer]:
    """A raw peer on any transport's message streams (memory, stdio_client, streamable HTTP), initialized."""
    async with anyio.create_task_group() as tg:
        peer = RawPeer(read_stream, write_stream)
        tg.start_soon(peer.pump)
        await peer.initialize()
        yield peer
        tg.cancel_scope.cancel()


@asynccontextmanager
async def served_in_memory(server: Any, crashes: list[Exception] | None = None) -> AsyncIterator[tuple[Any, Any]]:
    """An in-process server on memory streams: yields the client's (read, write) streams. A server whose
    run() dies is recorded in `crashes`, and its client's read stream ends."""
    lowlevel = lowlevel_of(server)
    async with create_client_server_memory_streams() as ((client_read, client_write), (server_read, server_write)):
        async with lifespan_of(server), anyio.create_task_group() as tg:

            async def serve() -> None:
                try:
                    await lowlevel.run(server_read, server_write, lowlevel.create_initialization_options())
                except Exception as crash:  # a dead session is something tests assert on
                    if crashes is None:
                        raise
                    crashes.append(crash)
                    await client_read.aclose()  # the peer stops waiting: nothing more will come

            tg.start_soon(serve)
            yield client_read, client_write
            tg.cancel_scope.cancel()


@asynccontextmanager
async def raw_session(server: Any) -> AsyncIterator[RawPeer]:
    """A raw peer on an in-process server; a server that dies is recorded in `peer.crashes`."""
    crashes: list[Exception] = []
    async with served_in_memory(server, crashes) as (client_read, client_write):
        async with raw_peer_over(client_read, client_write) as peer:
            peer.crashes = crashes
            if getattr(server, "lists_tools_first", False):  # its listing is all that names its tools
                await peer.call("listed-first", "tools/list", {})
            yield peer
