"""A recorder on the wire between a real client and a real server, on any transport.

It sits between the transport's message streams and the client, forwards every message unchanged,
and indexes what it saw: each request the client wrote, each answer the server wrote, and each
`notifications/cancelled` the client wrote, by request id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.message import SessionMessage

from tests.raw_peer import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse, unwrap


class Wire:
    def __init__(self, key_of: Callable[[Any], Any] = lambda request: None) -> None:
        self.requests: dict[Any, Any] = {}  # id -> the request the client wrote
        self.id_of: dict[Any, Any] = {}  # the caller's key for a request (`key_of`) -> its id
        self._key_of = key_of
        self.answers: dict[Any, list[Any]] = {}  # id -> every answer the server wrote for it
        self.cancels: dict[Any, list[Any]] = {}  # request id -> every cancel the client wrote for it
        self._changed = anyio.Event()

    def _from_client(self, message: Any) -> None:
        if isinstance(message, JSONRPCRequest):
            self.requests[message.id] = message
            self.id_of[self._key_of(message)] = message.id
        elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            request_id = (message.params or {}).get("requestId")
            self.cancels.setdefault(request_id, []).append(message)

    def _from_server(self, message: Any) -> None:
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            self.answers.setdefault(message.id, []).append(message)

    async def request_sent(self, key: Any) -> Any:
        """Wait until the client has written the request with this key; return its id."""
        with anyio.fail_after(10):
            while key not in self.id_of:
                await self._changed.wait()
        return self.id_of[key]

    def _note(self, item: Any, record: Callable[[Any], None]) -> None:
        if isinstance(item, SessionMessage):
            record(unwrap(item.message))
            self._changed.set()
            self._changed = anyio.Event()

    async def _forward(self, source: Any, destination: Any, record: Callable[[Any], None]) -> None:
        async with destination:  # the end of one side's stream ends the other's
            async for item in source:
                self._note(item, record)
                await destination.send(item)

    @asynccontextmanager
    async def between(
        self, transport: AbstractAsyncContextManager[tuple[Any, Any]]
    ) -> AsyncIterator[tuple[Any, Any]]:
        """The transport's (read, write) streams, recorded: pass this where a client takes a transport."""
        async with transport as (server_read, server_write):
            async with create_client_server_memory_streams() as (client_streams, (relay_read, relay_write)):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._forward, server_read, relay_write, self._from_server)
                    tg.start_soon(self._forward, relay_read, server_write, self._from_client)
                    yield client_streams
                    tg.cancel_scope.cancel()
