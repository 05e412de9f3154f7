"""Hooks into the mcp 2.x server. Thin: each wrapper reports what it saw and decides nothing.

Where a 2.x request lives (see docs/internals.md, "How it hooks in"):
- stream transports (stdio, SSE, streamable HTTP sessions, memory streams):
  `JSONRPCDispatcher._handle_request` runs the handler and then writes a result,
  writes an error, or settles unanswered after a cancel. The span lives here.
- in-process `Client(server)`: `DirectDispatcher._dispatch_request` returns the
  answer to the caller, or raises when the caller gave up.
- every path: `ServerRunner._on_request` returns the handler's result or raises.
  It reports how the handler ended; on the one path with no hook outside it
  (the 2026-07-28 single-exchange HTTP entry) it also owns the span.
- `OpenTelemetryMiddleware`: the SDK's own span steps aside while ours is current,
  so there is exactly one SERVER span per request.
"""

from __future__ import annotations

import math
from typing import Any

import anyio

from otel_mcp_cancel import tool_registry
from otel_mcp_cancel.answers import Answer, HandlerEnd
from otel_mcp_cancel.conventions import (
    NOTIFICATIONS_CANCELLED,
    TOOLS_LIST,
)
from otel_mcp_cancel.faults import contained, fault
from otel_mcp_cancel.hooks import sdk_v2 as sdk
from otel_mcp_cancel.hooks.capabilities import (
    CANCELS_V2,
    DIRECT_REQUESTS,
    HANDLER_ENDS_V2,
    HTTP_HANG_UPS,
    ONE_SERVER_SPAN,
    SESSIONS,
    STREAM_REQUESTS,
)
from otel_mcp_cancel.hooks.framework import FrameworkHooks
from otel_mcp_cancel.hooks.observations import (
    arg,
    cancel_reason,
    http_peer,
    joined,
    network_transport,
    note_result,
    observed,
    served_over,
    stdio_wire,
)
from otel_mcp_cancel.hooks.reach import Reach
from otel_mcp_cancel.hooks.wrapping import Hook
from otel_mcp_cancel.request_state import LIVE, RequestRecord, current_record
from otel_mcp_cancel.server_telemetry import ServerTelemetry
from otel_mcp_cancel.serving import Serving

_STDIO_SERVER_BINDINGS = ("mcp.server.stdio", "mcp.server.mcpserver.server", "mcp")


def _is_server_handler(on_request: object) -> bool:
    """Server-side dispatchers are driven by the runner's callbacks; a client's are not."""
    return getattr(on_request, "__module__", None) == sdk.ServerRunner.value.__module__


def _caller_gave_up() -> bool:
    """Single-exchange HTTP: the client hung up (the handler's scope is cancelled), so this result is never written."""
    return anyio.current_effective_deadline() == -math.inf


def _error_answer(exc: BaseException) -> Answer:
    """The error the single-exchange entry answers a raising handler with."""
    error = sdk.handler_exception_to_error_data(exc)
    return Answer.error(sdk.INTERNAL_ERROR.value) if error is None else Answer.error(error.code, error.message)


class ServerHooksV2(FrameworkHooks):
    _telemetry: ServerTelemetry
    sdk = sdk

    def __init__(self, telemetry: ServerTelemetry) -> None:
        super().__init__(telemetry)
        if telemetry is not None:
            telemetry.request_handlers = sdk.request_handlers

    def reaches(self) -> list[Reach]:
        return sdk.SERVER

    def hooks(self) -> list[Hook]:
        dispatcher = "mcp.shared.jsonrpc_dispatcher"
        return [
            # A request's span, the answer that decides it, and its caller hanging up: together, or its outcome
            # would be guessed.
            Hook(dispatcher, "JSONRPCDispatcher._handle_request", self._handle_request, STREAM_REQUESTS,
                 ("req", "dctx", "scope", "on_request")),
            Hook(dispatcher, "JSONRPCDispatcher._write_result", self._write_result, STREAM_REQUESTS,
                 ("request_id", "result")),
            Hook(dispatcher, "JSONRPCDispatcher._write_error", self._write_error, STREAM_REQUESTS,
                 ("request_id", "error")),
            Hook(dispatcher, "JSONRPCDispatcher._dispatch_notification", self._notification, CANCELS_V2,
                 ("msg", "metadata", "on_notify")),
            Hook("mcp.shared.direct_dispatcher", "DirectDispatcher._dispatch_request", self._direct_request,
                 DIRECT_REQUESTS, ("method", "params")),
            Hook("mcp.server.runner", "ServerRunner._on_request", self._runner_request, HANDLER_ENDS_V2,
                 ("dctx", "method", "params")),
            Hook(dispatcher, "JSONRPCDispatcher._fan_out_closed", self._read_ended, STREAM_REQUESTS),
            Hook("mcp.server.streamable_http", "StreamableHTTPServerTransport._clean_up_memory_streams",
                 self.request_stream_closing, HTTP_HANG_UPS, ("request_id",)),
            Hook("mcp.server.runner", "serve_connection", self._serve_connection, SESSIONS,
                 ("server", "dispatcher", "connection")),
            Hook("mcp.server.runner", "_serve_legacy_stream", self._legacy_stream, SESSIONS,
                 ("server", "read_stream")),
            Hook("mcp.server._otel", "OpenTelemetryMiddleware.__call__", self._sdk_middleware, ONE_SERVER_SPAN,
                 ("ctx", "call_next")),
            *self.framework_hooks("mcp.server.mcpserver", _STDIO_SERVER_BINDINGS),
        ]

    # -- stream transports -------------------------------------------------

    async def _handle_request(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        record: RequestRecord | None = None
        dctx: Any = None
        if self.active:
            try:
                req, dctx = arg(args, kwargs, 0, "req"), arg(args, kwargs, 1, "dctx")
                if _is_server_handler(arg(args, kwargs, 3, "on_request")):
                    transport = network_transport(dctx.message_metadata)
                    record = self._telemetry.open(req.method, req.params, req.id, transport)
            except Exception:
                fault("opening a server span")
        if record is None:
            return await wrapped(*args, **kwargs)
        try:
            record.in_session = self._telemetry.sessions.of(sdk.dispatcher_read_stream(instance))
            joined(record)
            http_peer(record, dctx.message_metadata)
            served_over(record)
        except Exception:
            fault("reading a request's session and peer")
        record.session = instance
        LIVE.add(dctx, record)
        with Serving(self._telemetry, record):
            try:
                return await wrapped(*args, **kwargs)
            finally:
                if dctx.cancel_requested.is_set():
                    record.note_cancel(None)  # keeps the notification's reason if the cancel hook saw it
                LIVE.discard(dctx, record)

    async def _write_result(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        try:
            if (record := self._answering(args, kwargs)) is not None:
                note_result(record, arg(args, kwargs, 1, "result"))
                self._telemetry.answering(record)
        except Exception:
            fault("observing an answer")
        return await wrapped(*args, **kwargs)

    async def _write_error(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        with contained("observing an answer"):
            if (record := self._answering(args, kwargs)) is not None:
                error = arg(args, kwargs, 1, "error")
                record.note_answer(Answer.error(error.code, error.message))
                self._telemetry.answering(record)
        return await wrapped(*args, **kwargs)

    def _read_ended(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """The dispatcher's read stream ended (the peer hung up; the SDK then cancels its handlers, and answers
        the interrupted ones with -32000 into the closed connection): its callers are gone."""
        if self.active:
            with contained("noting callers gone"):
                gone = LIVE.callers_gone(instance)
                over_stdio = stdio_wire.get() is not None
                self._telemetry.hung_up(self._telemetry.sessions.of(sdk.dispatcher_read_stream(instance)), gone,
                                        over_stdio)
        return wrapped(*args, **kwargs)

    def _answering(self, args: Any, kwargs: Any) -> RequestRecord | None:
        """The current request's record, if this write answers it (a handler may write other messages)."""
        record = current_record.get()()
        if self.active and record is not None and record.request_id == arg(args, kwargs, 0, "request_id"):
            return record
        return None

    def _notification(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if self.active:
            with contained("observing a cancel notification"):
                msg = arg(args, kwargs, 0, "msg")
                if msg.method == NOTIFICATIONS_CANCELLED and _is_server_handler(arg(args, kwargs, 2, "on_notify")):
                    request_id = sdk.cancelled_request_id_from_params(msg.params)
                    key = sdk.coerce_request_id(request_id) if request_id is not None else None
                    reason = cancel_reason(msg.params)
                    in_flight = sdk.in_flight(instance, {}).get(key)
                    cancelled = LIVE.note_cancel(in_flight.dctx, reason) if in_flight is not None else None
                    self._telemetry.cancel_received(msg.params, request_id, reason, cancelled, instance,
                                                    self._telemetry.sessions.of(sdk.dispatcher_read_stream(instance)))
        return wrapped(*args, **kwargs)

    # -- in-process ----------------------------------------------------------

    async def _direct_request(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        record = None
        if self.active:
            with contained("opening a server span"):
                if _is_server_handler(sdk.direct_on_request(instance)):
                    method, params = arg(args, kwargs, 0, "method"), arg(args, kwargs, 1, "params")
                    record = self._telemetry.open(method, params, None, None)
        if record is None:
            return await wrapped(*args, **kwargs)
        record.session = instance
        with Serving(self._telemetry, record):
            try:
                result = await wrapped(*args, **kwargs)
            except anyio.get_cancelled_exc_class():
                record.note_cancel(None)  # the caller gave up: nothing reaches it
                raise
            except sdk.MCPError.value as exc:
                if exc.error.code == sdk.REQUEST_TIMEOUT.value and record.handler is HandlerEnd.INTERRUPTED:
                    record.note_cancel(None)  # the caller's deadline fired: nothing was answered
                else:
                    record.note_answer(Answer.error(exc.error.code, exc.error.message))
                raise
            # Returned means delivered: the value goes straight back to the caller, even a cancelled one.
            note_result(record, result)
            return result

    # -- every path ------------------------------------------------------------

    async def _runner_request(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if not self.active:
            return await wrapped(*args, **kwargs)
        dctx = arg(args, kwargs, 0, "dctx")
        record = current_record.get()()
        if record is not None and not record.handler_claimed and record.method == arg(args, kwargs, 1, "method"):
            return await self._observe_handler(record, instance, dctx, wrapped, args, kwargs)
        single_exchange = sdk.SingleExchangeDispatchContext
        if not single_exchange.available or type(dctx) is not single_exchange.value:
            return await wrapped(*args, **kwargs)  # another entry, whose own hooks are not applied
        # Nothing outside the runner sees a request on the single-exchange HTTP entry.
        with contained("opening a server span"):
            method, params = arg(args, kwargs, 1, "method"), arg(args, kwargs, 2, "params")
            record = self._telemetry.open(method, params, dctx.request_id, network_transport(dctx.message_metadata))
        if record is None:
            return await wrapped(*args, **kwargs)
        with contained("reading a request's peer"):
            http_peer(record, dctx.message_metadata)
        with Serving(self._telemetry, record):
            try:
                result = await self._observe_handler(record, instance, dctx, wrapped, args, kwargs)
            except anyio.get_cancelled_exc_class():
                record.note_cancel(None)  # the client hung up (this entry cannot tell a shutdown apart)
                raise
            except Exception as exc:
                record.note_answer(_error_answer(exc))
                raise
            if _caller_gave_up():
                record.note_cancel(None)
            else:
                note_result(record, result)
            return result

    async def _observe_handler(
        self, record: RequestRecord, runner: Any, dctx: Any, wrapped: Any, args: Any, kwargs: Any
    ) -> Any:
        record.handler_claimed = True
        try:
            result = await observed(record.note_handler, wrapped, args, kwargs)
        finally:
            try:
                self._describe(record, runner, dctx)
            except Exception:
                fault("reading the server's request context")
        if record.method == TOOLS_LIST:
            with contained("reading a tools/list answer"):
                tool_registry.learn_listing(runner.server, result)
        return result

    @staticmethod
    def _describe(record: RequestRecord, runner: Any, dctx: Any) -> None:
        """What only the runner knows: the negotiated protocol version, the server, the request id."""
        record.protocol_version = runner.connection.protocol_version
        record.server = runner.server
        if record.request_id is None and dctx.request_id is not None:
            record.request_id, record.request_id_late = dctx.request_id, True  # on the span as it ends

    # -- sessions --------------------------------------------------------------

    async def _serve_connection(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """Serves a session's connection, or (born ready, from a request's envelope) one stateless request."""
        read_stream = None
        with contained("reading a connection"):
            if not arg(args, kwargs, 2, "connection").initialized.is_set():
                read_stream = sdk.dispatcher_read_stream(arg(args, kwargs, 1, "dispatcher"))
        return await self._serving_session(read_stream, wrapped, args, kwargs)

    async def _legacy_stream(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """Serves a handshake connection on a stream pair (stdio, memory streams): its dispatcher reads this."""
        return await self._serving_session(arg(args, kwargs, 1, "read_stream"), wrapped, args, kwargs)

    async def _serving_session(self, read_stream: Any, wrapped: Any, args: Any, kwargs: Any) -> Any:
        if not self.active or read_stream is None:
            return await wrapped(*args, **kwargs)
        self._telemetry.serving()
        with self._telemetry.sessions.session(read_stream, stdio_wire.get() is not None):
            return await wrapped(*args, **kwargs)

    async def _sdk_middleware(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """The SDK's span steps aside for requests we trace and for the cancels we record ourselves."""
        ctx, call_next = arg(args, kwargs, 0, "ctx"), arg(args, kwargs, 1, "call_next")
        if self.active and (current_record.get()() is not None or ctx.method == NOTIFICATIONS_CANCELLED):
            return await call_next(ctx)
        return await wrapped(*args, **kwargs)




