"""Hooks into the mcp 2.x sending side (a client's calls, and a server's own requests to its client).

`send_raw_request` on either dispatcher returns the answer, raises the peer's error, raises
REQUEST_TIMEOUT when the caller's timeout fired, or is cancelled with the caller. The SDK's own
"MCP send" span steps aside for ours, which is current when the SDK injects `traceparent`.
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
from opentelemetry.trace import NonRecordingSpan, SpanKind

from otel_mcp_cancel.answers import Answer, error_answer
from otel_mcp_cancel.client_telemetry import ClientTelemetry
from otel_mcp_cancel.conventions import CANCEL_REASON_CALLER, CANCEL_REASON_TIMEOUT, JSONRPC_REQUEST_ID
from otel_mcp_cancel.faults import contained, fault
from otel_mcp_cancel.hooks import sdk_v2 as sdk
from otel_mcp_cancel.hooks.capabilities import CANCEL_REASONS_CLIENT, CLIENT_REQUESTS, LATE_ANSWERS, ONE_CLIENT_SPAN
from otel_mcp_cancel.hooks.client_side import ClientHooks
from otel_mcp_cancel.hooks.observations import arg, note_result
from otel_mcp_cancel.hooks.reach import Reach
from otel_mcp_cancel.hooks.wrapping import Hook
from otel_mcp_cancel.messages import is_tool_error
from otel_mcp_cancel.request_state import current_client_record
from otel_mcp_cancel.serving import Serving


class ClientHooksV2(ClientHooks):
    _telemetry: ClientTelemetry
    sdk = sdk

    def reaches(self) -> list[Reach]:
        return sdk.CLIENT

    def session_stream(self, session: Any) -> object:
        return sdk.dispatcher_write_stream(sdk.client_dispatcher(session))  # None in process: no transport

    def hooks(self) -> list[Hook]:
        return [
            *self.transport_hooks(),
            *self.session_hooks(inherited=False),
            Hook("mcp.shared.jsonrpc_dispatcher", "JSONRPCDispatcher.send_raw_request", self._send, CLIENT_REQUESTS,
                 ("method", "params")),
            Hook("mcp.shared.direct_dispatcher", "DirectDispatcher.send_raw_request", self._send, CLIENT_REQUESTS,
                 ("method", "params")),
            Hook("mcp.shared.jsonrpc_dispatcher", "JSONRPCDispatcher._cancel_outbound", self._cancel_outbound,
                 CANCEL_REASONS_CLIENT, ("request_id", "reason")),
            Hook("mcp.shared.jsonrpc_dispatcher", "JSONRPCDispatcher._resolve_pending", self._resolve, LATE_ANSWERS,
                 ("request_id", "outcome")),
            Hook("mcp.shared.jsonrpc_dispatcher", "otel_span", self._sdk_span, ONE_CLIENT_SPAN),
        ]

    async def _send(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        record = None
        if self.active:
            try:
                method, params = arg(args, kwargs, 0, "method"), arg(args, kwargs, 1, "params")
                record = self.open(method, params, None, sdk.dispatcher_write_stream(instance))
            except Exception:
                fault("opening a client span")
        if record is None:
            return await wrapped(*args, **kwargs)
        with Serving(self._telemetry, record):
            try:
                result = await wrapped(*args, **kwargs)
            except anyio.get_cancelled_exc_class():
                record.note_cancel(CANCEL_REASON_CALLER)
                self._telemetry.gave_up(record)
                raise
            except sdk.MCPError.value as exc:
                if exc.error.code == sdk.REQUEST_TIMEOUT.value:
                    record.note_cancel(CANCEL_REASON_TIMEOUT)  # our own deadline; the peer answered nothing
                    self._telemetry.gave_up(record)
                else:
                    record.note_answer(error_answer(exc.error.code, exc.error.message))
                raise
            note_result(record, result)
            return result

    async def _cancel_outbound(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """The SDK sends a courtesy cancel when the caller's timeout fires or the caller is cancelled."""
        record = current_client_record.get()()
        if self.active and record is not None:
            with contained("observing a courtesy cancel"):
                reason = arg(args, kwargs, 1, "reason")
                timed_out = isinstance(reason, str) and reason.startswith("timed out")
                record.note_cancel(CANCEL_REASON_TIMEOUT if timed_out else CANCEL_REASON_CALLER)
                self._telemetry.gave_up(record)  # its waiter stops waiting: an answer from now on is thrown away
        return await wrapped(*args, **kwargs)

    def _resolve(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """Every answer the dispatcher reads, before it hands it to its waiter (or drops it: a call given up on)."""
        if self.active and self._telemetry.late_answers.held:
            with contained("reading a late answer"):
                request_id, outcome = arg(args, kwargs, 0, "request_id"), arg(args, kwargs, 1, "outcome")
                if isinstance(outcome, sdk.ErrorData.value):
                    seen = error_answer(outcome.code, outcome.message)
                else:
                    seen = Answer.result(is_tool_error(outcome))
                self._telemetry.answered_late(sdk.dispatcher_write_stream(instance), request_id, seen)
        return wrapped(*args, **kwargs)

    def _sdk_span(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """The SDK's client span: ours takes its place; the SDK still injects our (current) context."""
        record = current_client_record.get()()
        if not self.active or record is None or kwargs.get("kind") is not SpanKind.CLIENT:
            return wrapped(*args, **kwargs)
        try:
            request_id = (kwargs.get("attributes") or {}).get(JSONRPC_REQUEST_ID)
            if request_id is not None:
                record.request_id, record.request_id_late = request_id, True  # on the span as it ends
        except Exception:
            fault("reading the SDK's client span")
        return contextlib.nullcontext(NonRecordingSpan(record.span.get_span_context()))
