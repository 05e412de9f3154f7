"""On the 2026-07-28 revision's single-exchange HTTP entry, one POST carries one request, and its caller cancels by
closing that POST: no notification says so. An answer reaches the caller when the entry hands the response's last
body to the ASGI server while the caller's connection is open; handed over after it closed, the server drops it
(uvicorn does so silently), and the caller, told its call was cancelled, never learns the work was done.

So a request on that entry is concluded as the entry returns, not as its handler does: answered if its last body
went out on an open connection; else cancelled (and a ghost if its handler had finished) when the caller had
closed it, or unanswered. The connection is known closed when the entry read `http.disconnect` (its own watch,
in SSE mode) or, under uvicorn, by its request cycle's flag (`sdk_v2.uvicorn_disconnected`), read as the last
body is handed over. A closed connection the ASGI server has not yet noticed is not seen: the caller's client
then sees the answer arrive after it gave up (a `late_answer`, where the client is instrumented).
"""

from __future__ import annotations

import contextvars
import socket
import weakref
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.request_state import RequestRecord

Message = MutableMapping[str, Any]
Conclude = Callable[[RequestRecord], None]
# What is read on the ASGI server's request cycle: its own closed flag, and its connection's transport.
ServerReach = tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]]


class HttpExchange:
    """One POST on the single-exchange entry: the `receive` and `send` the entry is handed, observed, and the
    request it carries, held until the entry returns (`AnswerWire`)."""

    __slots__ = ("_receive", "_send", "_server_reach", "closed", "answered", "_held", "__weakref__")

    def __init__(self, receive: Callable[[], Awaitable[Message]], send: Callable[[Message], Awaitable[None]],
                 server_reach: ServerReach) -> None:
        self._receive, self._send, self._server_reach = receive, send, server_reach
        self.closed = False  # the caller closed its connection
        self.answered = False  # the response's last body went out while it was open
        self._held: tuple[RequestRecord, Conclude] | None = None

    async def receive(self) -> Message:
        message = await self._receive()
        if message.get("type") == "http.disconnect":
            self.closed = True
        return message

    async def send(self, message: Message) -> None:
        if message.get("type") != "http.response.body" or message.get("more_body", False):
            return await self._send(message)
        with contained("reading whether an HTTP caller is still there"):
            self.closed = self.closed or _caller_closed(_server_of(self._receive), *self._server_reach)
        await self._send(message)
        self.answered = not self.closed

    def holds(self, record: RequestRecord, conclude: Conclude) -> bool:
        self._held = (record, conclude)
        return True

    def ended(self) -> None:
        """The entry returned (or raised): conclude the request it carried on what reached its caller."""
        if self._held is None:
            return
        (record, conclude), self._held = self._held, None
        if not self.answered:
            record.note_unwritten(cancelled=self.closed)
        conclude(record)


def _caller_closed(cycle: object, disconnected: Callable[[Any, Any], Any],
                   transport: Callable[[Any, Any], Any]) -> bool:
    """Whether the caller's connection is closed: the server says so, or its socket has read the caller's end
    (its FIN, or a reset) that the server's event loop has yet to process. Peeked at, never read."""
    if disconnected(cycle, False) is True:
        return True
    found = transport(cycle, None)
    sock = found.get_extra_info("socket") if found is not None else None
    fd = sock.fileno() if sock is not None else -1
    if fd < 0:
        return False
    peek = socket.socket(fileno=fd)
    try:
        return peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False  # open, nothing more sent
    except OSError:
        return True  # reset by the caller
    finally:
        peek.detach()  # the server's socket, not ours to close


def _server_of(receive: object, depth: int = 4) -> object:
    """The ASGI server's object behind a `receive` (uvicorn's request cycle, whose bound method it is), found
    through the middleware that wrap it in closures of their own over a `receive` (mcp's body-size limit does)."""
    for _ in range(depth):
        owner = getattr(receive, "__self__", None)
        if owner is not None:
            return owner
        code, cells = getattr(receive, "__code__", None), getattr(receive, "__closure__", None)
        if code is None or not cells or "receive" not in code.co_freevars:
            return None
        receive = cells[code.co_freevars.index("receive")].cell_contents
    return None


# The exchange whose request is being served in this task, held by a weak reference: a task its handler spawned
# copies the context, and must not keep the exchange, its record or its connection alive.
current_exchange: contextvars.ContextVar[weakref.ref[HttpExchange] | None] = contextvars.ContextVar(
    "otel_mcp_cancel_http_exchange", default=None)
