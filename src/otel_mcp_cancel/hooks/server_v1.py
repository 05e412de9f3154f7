"""Hooks into the mcp 1.x server (1.12.3 to 1.30). Thin: each wrapper reports what it saw; one also guards.

Where a 1.x request lives:
- `Server._handle_request` awaits the handler and then `responder.respond(...)`.
  The span lives here; `initialize` is answered earlier, in `ServerSession._received_request`.
- `RequestResponder.respond` writes the answer. Entered after `cancel()` has
  already answered the id, it is the ghost: the SDK asserts
  `Request already responded to` there and the session dies (SDK issue #2416).
- `RequestResponder.cancel` runs in the receive loop for `notifications/cancelled`:
  it cancels the handler and writes the acknowledgement `ErrorData(code=0, "Request cancelled")`.

The guard (on by default) drops an answer that would be a second one for its id:
a late `respond()` after the acknowledgement, and a `cancel()` whose request is
already answering (its acknowledgement would be the second answer, and its
cancellation would interrupt the answer's write and end the session).
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

from otel_mcp_cancel import tool_registry
from otel_mcp_cancel.answers import Answer, HandlerEnd
from otel_mcp_cancel.attributes import camel_case
from otel_mcp_cancel.conventions import INITIALIZE, TOOLS_LIST
from otel_mcp_cancel.faults import contained, fault
from otel_mcp_cancel.hooks import sdk_v1 as sdk
from otel_mcp_cancel.hooks.capabilities import (
    HTTP_HANG_UPS,
    LATE_CANCELS_V1,
    REFUSED_V1,
    REQUESTS_V1,
    SESSIONS,
)
from otel_mcp_cancel.hooks.framework import FrameworkHooks
from otel_mcp_cancel.hooks.observations import (
    cancel_reason,
    http_peer,
    is_tool_error,
    joined,
    network_transport,
    note_result,
    served_over,
    stdio_wire,
    wire_params,
)
from otel_mcp_cancel.hooks.reach import Reach
from otel_mcp_cancel.hooks.wrapping import Hook
from otel_mcp_cancel.request_state import LIVE, RequestRecord
from otel_mcp_cancel.server_telemetry import ServerTelemetry
from otel_mcp_cancel.serving import Serving

_STDIO_SERVER_BINDINGS = ("mcp.server.stdio", "mcp.server.fastmcp.server", "mcp")


def _negotiated_version(session: Any) -> str | None:
    """The version the server answered `initialize` with: the client's, if supported, else the latest."""
    client_params = getattr(session, "client_params", None)
    if client_params is None:
        return None
    requested = client_params.protocolVersion
    if requested in sdk.SUPPORTED_PROTOCOL_VERSIONS.value:
        return requested
    return sdk.types.value.LATEST_PROTOCOL_VERSION


def _handler_end(response: Any) -> HandlerEnd:
    if isinstance(response, sdk.types.value.ErrorData):
        return HandlerEnd.RAISED
    return HandlerEnd.RETURNED_TOOL_ERROR if is_tool_error(response) else HandlerEnd.RETURNED


def _acknowledged(responder: Any) -> bool:
    """`cancel()` already answered this id with its acknowledgement."""
    return sdk.responder_completed(responder, False) and getattr(responder, "cancelled", False)


def _answering(responder: Any) -> bool:
    """`respond()` already began this id's answer."""
    return sdk.responder_completed(responder, False) and not getattr(responder, "cancelled", False)


async def _not_written() -> None:
    """What a guarded `respond` awaits in place of a second answer: nothing."""


def _cancel_being_handled() -> Any:
    """The validated `notifications/cancelled` the receive loop is handling: `cancel()` is called without it."""
    root = getattr(sdk.receiving_notification.in_callers(sys._getframe(1)), "root", None)
    return root if isinstance(root, sdk.types.value.CancelledNotification) else None


class ServerHooksV1(FrameworkHooks):
    _telemetry: ServerTelemetry
    sdk = sdk

    def reaches(self) -> list[Reach]:
        return sdk.SERVER

    def __init__(self, telemetry: ServerTelemetry, *, guard: bool) -> None:
        super().__init__(telemetry)
        self._guard = guard

    def hooks(self) -> list[Hook]:
        return [
            Hook("mcp.server.lowlevel.server", "Server.run", self.session_run, SESSIONS,
                 ("read_stream", "write_stream", "initialization_options", "raise_exceptions", "stateless")),
            # A request's span, every answer that decides it (its own, a cancel's acknowledgement, none after a
            # hang-up), and the guard: together, or its outcome would be guessed.
            Hook("mcp.server.lowlevel.server", "Server._handle_request", self._handle_request, REQUESTS_V1,
                 ("message", "req", "session")),
            Hook("mcp.server.session", "ServerSession._received_request", self._received_request, REQUESTS_V1,
                 ("responder",)),
            Hook("mcp.shared.session", "RequestResponder.respond", self._respond, REQUESTS_V1, ("response",)),
            Hook("mcp.shared.session", "RequestResponder.cancel", self._cancel, REQUESTS_V1),
            Hook("mcp.server.session", "ServerSession._receive_loop", self._receive_loop, REQUESTS_V1),
            Hook("mcp.server.streamable_http", "StreamableHTTPServerTransport._clean_up_memory_streams",
                 self.request_stream_closing, HTTP_HANG_UPS, ("request_id",)),
            # A cancel for a request no longer in flight reaches nothing but this validation.
            Hook("mcp.types", "ClientNotification.model_validate", self._notification_validated,
                 LATE_CANCELS_V1, inherited=True),
            # Nor does a request the session refuses (an unknown method, params that do not validate).
            Hook("mcp.types", "ClientRequest.model_validate", self._request_validated,
                 REFUSED_V1, inherited=True),
            *self.framework_hooks("mcp.server.fastmcp", _STDIO_SERVER_BINDINGS),
        ]

    def _open(self, responder: Any, server: Any, session: Any) -> RequestRecord | None:
        request = responder.request.root
        transport = network_transport(responder.message_metadata)
        params = wire_params(request, self._telemetry.params_as_sent)
        record = self._telemetry.open(request.method, params, responder.request_id, transport, checked=True)
        if record is not None:
            record.server = server
            self._place(record, session, responder.message_metadata)
        return record

    def _place(self, record: RequestRecord, session: Any, message_metadata: Any) -> None:
        """A request's session, its peer, and the protocol version in force."""
        record.session = session
        try:
            record.in_session = in_session = self._telemetry.sessions.of(sdk.session_read_stream(session))
            joined(record)
            http_peer(record, message_metadata)
            served_over(record)
        except Exception:
            in_session = None
            fault("reading a request's session and peer")
        # Its session knows the version once a request in it was served; before that, it is negotiated now.
        known = in_session.protocol_version if in_session is not None else None
        record.protocol_version = known if known is not None else _negotiated_version(session)

    async def _serve(self, record: RequestRecord, responder: Any, wrapped: Any, args: Any, kwargs: Any) -> Any:
        """Serve a request with its record current; how its answer's write failed is read here, where the
        write's exception passes on its way out (`respond` itself is handed on as the SDK's own coroutine)."""
        LIVE.add(responder, record)
        with Serving(self._telemetry, record):
            try:
                return await wrapped(*args, **kwargs)
            except anyio.get_cancelled_exc_class():
                if record.answer_writing:
                    record.write_interrupted = True
                record.note_handler(HandlerEnd.INTERRUPTED)
                raise
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                if record.answer_writing:
                    record.note_undelivered()  # the caller's connection had closed: nothing was written
                raise
            finally:
                LIVE.discard(responder, record)

    def _handle_request(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """Not a coroutine: a request that is not traced is handed on as the SDK's own coroutine, and a traced
        one is served by one layer of ours (every layer is paid again on every request)."""
        record = responder = None
        if self.active and self._telemetry.traced():
            try:
                # Positional, as 1.x calls it: read inline, on every request.
                responder = args[0] if args else kwargs["message"]
                record = self._open(responder, instance, args[2] if len(args) > 2 else kwargs["session"])
            except Exception:
                fault("opening a server span")
        if record is None:
            return wrapped(*args, **kwargs)
        return self._serve(record, responder, wrapped, args, kwargs)

    def _received_request(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """`initialize` is answered here, in the receive loop, and never reaches `Server._handle_request`. Not a
        coroutine: every other request passes through as the SDK's own coroutine."""
        record = responder = None
        try:
            responder = args[0] if args else kwargs["responder"]
            initialize = getattr(responder.request.root, "method", None) == INITIALIZE  # asked first: it is rare
            if initialize and self.active and self._telemetry.traced():
                record = self._open(responder, None, instance)
        except Exception:
            fault("opening a server span")
        if record is None:
            return wrapped(*args, **kwargs)
        return self._serve(record, responder, wrapped, args, kwargs)

    def _respond(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """Not a coroutine: the answer is observed as `respond` is called, and the SDK's own coroutine writes it
        (how that write fails is read in `_serve`)."""
        late = _acknowledged(instance)
        if self.active:
            try:
                response = args[0] if args else kwargs["response"]
                if (record := LIVE.find(instance)) is not None:
                    if record.handler is None:  # the framework's hook saw the user's function end first
                        record.note_handler(_handler_end(response))
                    if not late:
                        record.answer_writing = True
                        if isinstance(response, sdk.types.value.ErrorData):
                            record.note_answer(Answer.error(response.code, response.message))
                        else:
                            note_result(record, response)
                        self._telemetry.answering(record)
                        if record.method == TOOLS_LIST:
                            self._learn_listing(record, response)
                        elif record.method == INITIALIZE:  # the version it answers with: on its span and point
                            record.protocol_version = getattr(getattr(response, "root", None), "protocolVersion",
                                                              None)
            except Exception:
                fault("observing an answer")
            if late and self._guard:
                return _not_written()  # the peer already has its one answer; a second would end the session
        return wrapped(*args, **kwargs)

    async def _receive_loop(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """A session's read stream ended (the peer hung up): 1.x lets its handlers run on, and their answers
        reach nobody. A loop stopped by a cancel (the server shutting down) says nothing of the caller."""
        ended = await wrapped(*args, **kwargs)
        if self.active:
            with contained("noting callers gone"):
                gone = LIVE.callers_gone(instance)
                over_stdio = stdio_wire.get() is not None
                self._telemetry.hung_up(self._telemetry.sessions.of(sdk.session_read_stream(instance)), gone,
                                        over_stdio)
        return ended

    async def _cancel(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        answering = _answering(instance)
        if self.active:
            with contained("observing a cancel notification"):
                notification = _cancel_being_handled()
                reason = cancel_reason(notification.params) if notification is not None else None
                cancelled = LIVE.note_cancel(instance, reason)
                if not answering and cancelled is not None:
                    cancelled.note_answer(Answer.cancel_ack())
                # Answered and concluded, though not yet out of the session's in-flight table: by its session.
                session = sdk.responder_session(instance)
                self._telemetry.cancel_received(None, instance.request_id, reason, cancelled, session,
                                                self._telemetry.sessions.of(sdk.session_read_stream(session)))
                if not sdk.responder_entered(instance, True):  # its handler has not begun: the SDK drops the cancel
                    self._telemetry.unheard(session, instance.request_id)
        if answering and self.active and self._guard:
            return None  # a cancel after the answer changes nothing; letting it run would break the session
        return await wrapped(*args, **kwargs)

    def _notification_validated(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """A cancel for a request the session no longer has in flight: 1.x ignores it without a call."""
        notification = wrapped(*args, **kwargs)
        if self.active and isinstance(notification.root, sdk.types.value.CancelledNotification):
            with contained("observing a cancel notification"):
                session = sdk.receiving_session.in_callers(sys._getframe(1))
                params = notification.root.params
                if isinstance(session, sdk.ServerSession.value) and params.requestId not in sdk.session_in_flight(
                        session, {}):
                    self._telemetry.cancel_received(None, params.requestId, cancel_reason(params), None, session,
                                                    self._telemetry.sessions.of(sdk.session_read_stream(session)))
        return notification

    def _request_validated(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """A request the session refuses before any handler (a method this line does not know, such as
        `server/discover`; params that fail validation): 1.x answers it INVALID_PARAMS from its receive loop,
        where nothing else sees it. It gets its span and its point, so a client that cannot talk is seen."""
        try:
            return wrapped(*args, **kwargs)
        except Exception:
            if self.active and self._telemetry.traced():
                with contained("recording a refused request"):
                    caller = sys._getframe(1)
                    self._refused(sdk.receiving_session.in_callers(caller), sdk.receiving_message.in_callers(caller))
            raise

    def _refused(self, session: Any, message: Any) -> None:
        request = getattr(getattr(message, "message", None), "root", None)
        types = sdk.types.value
        if not isinstance(session, sdk.ServerSession.value) or not isinstance(request, types.JSONRPCRequest):
            return
        metadata = getattr(message, "metadata", None)
        record = self._telemetry.open(request.method, request.params, request.id, network_transport(metadata),
                                      checked=True)
        if record is None:
            return
        self._place(record, session, metadata)
        with Serving(self._telemetry, record):
            record.note_answer(Answer.error(types.INVALID_PARAMS, "Invalid request parameters"))  # what 1.x sends

    @staticmethod
    def _learn_listing(record: RequestRecord, response: Any) -> None:
        if record.server is not None:
            tools = getattr(getattr(response, "root", None), "tools", None) or []
            tool_registry.learn(record.server, [(tool.name, camel_case(tool.annotations)) for tool in tools])
