"""Over streamable HTTP an answer reaches its caller when its bytes are handed to the ASGI server on the POST that
carried its request, while the caller's connection is open. Handed over after the caller closed it, the server
drops them (uvicorn does so silently): the SDK has written its answer, and nobody gets it.

So a request that came on a POST the session manager served is concluded once its answer's bytes went out (as
its answer says), or once the POST ended without them: its caller left (a ghost if its handler had finished); on
the 2026-07-28 revision, closing the POST is how a caller cancels: cancelled. The answer is told apart among the
POST's body chunks by the request id at its head, in JSON or in an SSE event's data, as both SDK lines write it;
a request waits for it only once this process has recognised an answer so (a writer that changed its form is
never waited for), and a response that ended whole on an open connection delivered it. The connection is known
closed when the server read `http.disconnect`, or, under uvicorn, by its request cycle's flag and its socket
(`hooks/asgi_servers`), read as the answer is handed over. A close the server's kernel has not yet received is
not seen: the caller's client then reads the answer after it gave up (a `late_answer`, where instrumented).
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.request_state import RequestRecord
from otel_mcp_cancel.session_telemetry import has_sessions
from otel_mcp_cancel.stdio_wire import NOT_AN_ANSWER, answered_id

Message = MutableMapping[str, Any]
Conclude = Callable[[RequestRecord], None]
# What is read on the ASGI server's request cycle: its own closed flag, and its connection's transport.
ServerReach = tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]]
_SSE_DATA = b"data: "
_HEAD_BYTES = 4096  # enough for an answer's head and its id; never the whole of a large result


class AnswerForm:
    """Whether this process has read an answer in a POST's body as the SDK writes it (one per hook set)."""

    recognised = False


class HttpExchange:
    """One HTTP request the session manager serves: the `receive` and `send` it is handed, observed, and the MCP
    request its POST carries, held until its answer is out (`AnswerWire`)."""

    __slots__ = ("_receive", "_send", "_server_reach", "_form", "_posted", "_closed", "_completed", "_ended",
                 "_answered", "_held")

    def __init__(self, scope: Message, receive: Callable[[], Awaitable[Message]],
                 send: Callable[[Message], Awaitable[None]], server_reach: ServerReach, form: AnswerForm) -> None:
        self._receive, self._send, self._server_reach, self._form = receive, send, server_reach, form
        self._posted = scope.get("method") == "POST"  # only a POST's response carries an answer
        self._closed = False  # the caller closed its connection
        self._completed = False  # the response's last bytes went out on an open connection
        self._ended = False
        self._answered: object = NOT_AN_ANSWER  # the id of the answer that went out on an open connection
        self._held: tuple[RequestRecord, Conclude] | None = None

    async def receive(self) -> Message:
        message = await self._receive()
        if message.get("type") == "http.disconnect":
            self._closed = True
        return message

    async def send(self, message: Message) -> None:
        if not self._posted or message.get("type") != "http.response.body":
            return await self._send(message)
        answer = _answer_in(message.get("body"))
        last = not message.get("more_body", False)
        if answer is NOT_AN_ANSWER and not last:
            return await self._send(message)
        with contained("reading whether an HTTP caller is still there"):
            self._closed = self._closed or _caller_closed(_server_of(self._receive), *self._server_reach)
        await self._send(message)
        if self._closed:
            return
        self._completed = last
        if answer is not NOT_AN_ANSWER:
            self._form.recognised = True
            self._answered = answer
            held = self._held
            if held is not None and held[0].request_id == answer:
                self._held = None
                with contained("concluding an HTTP request as its answer went out"):  # never into the app's send
                    held[1](held[0])

    def holds(self, record: RequestRecord, conclude: Conclude) -> bool:
        """Whether the record waits for its answer to go out (concluded then); False: conclude it now."""
        if not self._form.recognised or self._answered == record.request_id:
            return False  # never waited for, or out already, ahead of its handler's task
        if self._ended:
            if not self._completed:
                _unanswered(record, self._closed)
            return False
        earlier, self._held = self._held, (record, conclude)
        if earlier is not None:  # a request the SDK served for itself first (its own tools/list, to check headers)
            earlier[1](earlier[0])
        return True

    def ended(self) -> None:
        """The POST's response ended, or was given up: a request still held had no answer reach its caller,
        unless the response ended whole (an answer in a form not recognised)."""
        self._ended = True
        held, self._held = self._held, None
        if held is not None:
            if not self._completed:
                _unanswered(held[0], self._closed)
            held[1](held[0])


def exchange_of(request: object) -> HttpExchange | None:
    """The exchange a Starlette request of the SDK's was read through (its `receive` is the exchange's)."""
    owner = getattr(getattr(request, "receive", None), "__self__", None)
    return owner if type(owner) is HttpExchange else None


def _unanswered(record: RequestRecord, closed: bool) -> None:
    """No answer reached the caller: on a session, it left; on the 2026-07-28 revision, leaving is its cancel."""
    if has_sessions(record.protocol_version):
        record.note_undelivered()
    else:
        record.note_unwritten(cancelled=closed)


def _answer_in(body: object) -> object:
    """The request id of the answer a body chunk carries: the whole JSON body, or an SSE event's data."""
    if type(body) is not bytes or not body:
        return NOT_AN_ANSWER
    if body[:1] == b"{":
        start = 0
    else:
        start = 0 if body.startswith(_SSE_DATA) else body.find(b"\n" + _SSE_DATA) + 1
        if start == 0 and not body.startswith(_SSE_DATA):
            return NOT_AN_ANSWER
        start += len(_SSE_DATA)
    return answered_id(body[start:start + _HEAD_BYTES].decode("utf-8", "replace"))


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
