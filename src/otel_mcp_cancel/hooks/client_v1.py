"""Hooks into the mcp 1.x sending side (`BaseSession.send_request`: a client's calls, and a server's own
requests to its client).

It returns the result, raises `McpError` with the peer's error (or 1.x's cancel acknowledgement), raises
`McpError(408)` when the read timeout fired, raises the closed stream when the connection had closed before the
request could be sent, or is cancelled with the caller. 1.x has no OpenTelemetry:
the hook hands `send_request` the request behind a proxy whose wire form carries W3C `traceparent` in
`params._meta`, so the server's span joins the caller's trace.
"""

from __future__ import annotations

from typing import Any

import anyio
import wrapt
from opentelemetry.propagate import inject

from otel_mcp_cancel.answers import Answer, error_answer
from otel_mcp_cancel.client_telemetry import ClientTelemetry
from otel_mcp_cancel.conventions import CANCEL_REASON_CALLER, CANCEL_REASON_TIMEOUT
from otel_mcp_cancel.faults import contained, fault
from otel_mcp_cancel.hooks import sdk_v1 as sdk
from otel_mcp_cancel.hooks.capabilities import CLIENT_REQUESTS, LATE_ANSWERS
from otel_mcp_cancel.hooks.client_side import ClientHooks
from otel_mcp_cancel.hooks.observations import (
    WIRE_DUMP,
    arg,
    connection_lost,
    note_result,
    wire_params,
)
from otel_mcp_cancel.hooks.reach import Reach
from otel_mcp_cancel.hooks.wrapping import Hook
from otel_mcp_cancel.messages import is_tool_error
from otel_mcp_cancel.serving import Serving

# 1.x reports its own read timeout as an HTTP-like 408, which no JSON-RPC peer sends.
_READ_TIMEOUT_CODE = 408
_COURTESY_CANCEL_SECONDS = 5


class TracedRequest(wrapt.ObjectProxy):
    """The caller's request as `send_request` sees it: the same object in every respect but its wire form,
    which carries W3C trace context in `params._meta` (requests sent without params get params for it,
    as 2.x does). 1.x has no place to inject trace context; its `send_request` dumps the request once,
    with `model_dump(**WIRE_DUMP)`, and sends that (1.12.3 to 1.30). The caller's request, its params
    and its `_meta` are never changed: a caller may reuse or inspect them."""

    def __init__(self, request: Any, carrier: dict[str, str]) -> None:
        super().__init__(request)
        self._self_carrier = carrier

    def model_dump(self, *args: Any, **kwargs: Any) -> Any:
        # Dumped now, not reused from the span's: a hook wrapped inside ours may have changed the request.
        wire = self.__wrapped__.model_dump(*args, **kwargs)
        if args or kwargs != WIRE_DUMP:
            return wire
        params = wire.get("params") or {}
        wire["params"] = {**params, "_meta": {**(params.get("_meta") or {}), **self._self_carrier}}
        return wire


def with_trace_context(request: Any) -> Any:
    """The request to send in place of `request`: traced, if there is trace context to send."""
    carrier: dict[str, str] = {}
    inject(carrier)
    return TracedRequest(request, carrier) if carrier else request


async def _courtesy_cancel(session: Any, request_id: Any, reason: str) -> None:
    """Tell the server what 2.x clients tell it: shielded (the caller may be cancelled) and bounded."""
    with anyio.move_on_after(_COURTESY_CANCEL_SECONDS, shield=True):
        with contained("sending a courtesy cancel"):
            types = sdk.types.value
            params = types.CancelledNotificationParams(requestId=request_id, reason=reason)
            cancel = types.CancelledNotification(method="notifications/cancelled", params=params)
            await session.send_notification(types.ClientNotification(cancel))


class ClientHooksV1(ClientHooks):
    _telemetry: ClientTelemetry
    finds_current_record = False  # nothing inside `send_request` is hooked
    sdk = sdk

    def reaches(self) -> list[Reach]:
        return sdk.CLIENT

    def __init__(self, telemetry: ClientTelemetry, *, courtesy_cancel: bool, late_answers: bool) -> None:
        super().__init__(telemetry)
        self._courtesy_cancel = courtesy_cancel
        self._late_answers = late_answers

    def hooks(self) -> list[Hook]:
        hooks = [
            *self.transport_hooks(),
            *self.session_hooks(inherited=True),  # 1.x: ClientSession has BaseSession's
            Hook("mcp.shared.session", "BaseSession.send_request", self._send, CLIENT_REQUESTS, ("request",)),
        ]
        if self._late_answers:
            hooks.append(Hook("mcp.shared.session", "BaseSession._handle_response", self._response, LATE_ANSWERS,
                              ("message",)))
        return hooks

    async def _response(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """Every answer the session reads, before its SDK routes it (or throws it away: a call given up on)."""
        if self.active and self._telemetry.late_answers.held:
            with contained("reading a late answer"):
                answer = arg(args, kwargs, 0, "message").message.root
                if isinstance(answer, sdk.types.value.JSONRPCError):
                    seen = error_answer(answer.error.code, answer.error.message)
                else:
                    seen = Answer.result(is_tool_error(answer.result))
                self._telemetry.answered_late(sdk.session_write_stream(instance), answer.id, seen)
        return await wrapped(*args, **kwargs)

    def session_stream(self, session: Any) -> object:
        return sdk.session_write_stream(session)

    async def _send(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        record, outgoing = None, args[0] if args else kwargs["request"]
        if self.active and self._telemetry.traced():
            try:
                request = getattr(outgoing, "root", outgoing)  # FastMCP 2.x passes bare requests
                params = wire_params(request, self._telemetry.params_as_sent)
                request_id = sdk.session_next_request_id(instance)
                record = self.open(request.method, params, request_id, sdk.session_write_stream(instance), checked=True)
            except Exception:
                fault("opening a client span")
        if record is None:
            return await wrapped(*args, **kwargs)
        with Serving(self._telemetry, record):
            try:
                traced = with_trace_context(outgoing)
                if args:
                    args = (traced, *args[1:])
                else:
                    kwargs = {**kwargs, "request": traced}
            except Exception:
                fault("injecting trace context")
            try:
                result = await wrapped(*args, **kwargs)
            except anyio.get_cancelled_exc_class():
                record.note_cancel(CANCEL_REASON_CALLER)
                self._telemetry.gave_up(record)
                if self._courtesy_cancel and isinstance(instance, sdk.ClientSession.value):
                    await _courtesy_cancel(instance, record.request_id, "caller cancelled")
                raise
            except sdk.McpError.value as exc:
                if exc.error.code == _READ_TIMEOUT_CODE:
                    record.note_cancel(CANCEL_REASON_TIMEOUT)
                    self._telemetry.gave_up(record)
                    if self._courtesy_cancel and isinstance(instance, sdk.ClientSession.value):
                        await _courtesy_cancel(instance, record.request_id, "timed out")
                else:
                    record.note_answer(error_answer(exc.error.code, exc.error.message))
                raise
            except Exception as exc:
                # 1.x raises the closed stream itself when the connection closed before the request was sent
                # (a killed server's, say): the same failure as its CONNECTION_CLOSED for one closed after.
                if connection_lost(exc):
                    record.note_answer(Answer.connection_closed())
                raise
            note_result(record, result)
            return result
