"""Hooks into the mcp 1.x sending side (`BaseSession.send_request`: a client's calls, and a server's own
requests to its client).

It returns the result, raises `McpError` with the peer's error (or 1.x's cancel acknowledgement), raises
`McpError(408)` when the read timeout fired, or is cancelled with the caller. 1.x has no OpenTelemetry:
the hook sends a copy of the request with W3C `traceparent` in `params._meta` (requests sent without
params get params for it, as 2.x does), so the server's span joins the caller's trace.
"""

from __future__ import annotations

import functools
import typing
from typing import Any

import anyio
from mcp import ClientSession, types
from mcp.shared.exceptions import McpError
from opentelemetry.propagate import inject
from pydantic import BaseModel

from otel_mcp_cancel.client_telemetry import ClientTelemetry
from otel_mcp_cancel.conventions import CANCEL_REASON_CALLER, CANCEL_REASON_TIMEOUT
from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.hooks.observations import ClientHooks, arg, note_result, wire_params
from otel_mcp_cancel.hooks.wrapping import Hook
from otel_mcp_cancel.outcome import error_answer

# 1.x reports its own read timeout as an HTTP-like 408, which no JSON-RPC peer sends.
_READ_TIMEOUT_CODE = 408
_COURTESY_CANCEL_SECONDS = 5


@functools.lru_cache(maxsize=None)
def _params_type(request_type: type) -> Any:
    """The params model a request type takes, for a request sent without params (ping, 1.30's tools/list)."""
    annotation = request_type.model_fields["params"].annotation
    return next((t for t in typing.get_args(annotation) if isinstance(t, type) and issubclass(t, BaseModel)), None)


def with_trace_context(request_argument: Any) -> Any:
    """A copy of the outgoing request with W3C `traceparent` in `params._meta`. The caller's request, its
    params and its `_meta` are never changed: a caller may reuse or inspect them."""
    request = getattr(request_argument, "root", request_argument)
    carrier: dict[str, str] = {}
    inject(carrier)
    if not carrier:
        return request_argument
    params = request.params
    if params is None:
        params = _params_type(type(request))()
    meta = {} if params.meta is None else params.meta.model_dump(by_alias=True, exclude_none=True)
    meta = types.RequestParams.Meta.model_validate({**meta, **carrier})
    copy = request.model_copy(update={"params": params.model_copy(update={"meta": meta})})
    # Copied, not rebuilt: building the root model again would validate the request once more.
    return copy if request is request_argument else request_argument.model_copy(update={"root": copy})


async def _courtesy_cancel(session: Any, request_id: object, reason: str) -> None:
    """Tell the server what 2.x clients tell it: shielded (the caller may be cancelled) and bounded."""
    with anyio.move_on_after(_COURTESY_CANCEL_SECONDS, shield=True):
        with contained("sending a courtesy cancel"):
            params = types.CancelledNotificationParams(requestId=request_id, reason=reason)
            cancel = types.CancelledNotification(method="notifications/cancelled", params=params)
            await session.send_notification(types.ClientNotification(cancel))


class ClientHooksV1(ClientHooks):
    _telemetry: ClientTelemetry

    def __init__(self, telemetry: ClientTelemetry, *, courtesy_cancel: bool) -> None:
        super().__init__(telemetry)
        self._courtesy_cancel = courtesy_cancel

    def hooks(self) -> list[Hook]:
        return [
            *self.transport_hooks(),
            *self.session_hooks(inherited=True),  # 1.x: ClientSession has BaseSession's
            Hook("mcp.shared.session", "BaseSession.send_request", self._send),
        ]

    def session_stream(self, session: Any) -> object:
        return session._write_stream

    async def _send(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        record, outgoing = None, arg(args, kwargs, 0, "request")
        if self.active:
            with contained("opening a client span"):
                request = getattr(outgoing, "root", outgoing)  # FastMCP 2.x passes bare requests
                record = self.open(request.method, wire_params(request), instance._request_id, instance._write_stream)
        if record is None:
            return await wrapped(*args, **kwargs)
        with self._telemetry.serving(record):
            with contained("injecting trace context"):
                traced = with_trace_context(outgoing)
                args, kwargs = ((traced, *args[1:]), kwargs) if args else (args, {**kwargs, "request": traced})
            try:
                result = await wrapped(*args, **kwargs)
            except anyio.get_cancelled_exc_class():
                record.note_cancel(CANCEL_REASON_CALLER)
                if self._courtesy_cancel and isinstance(instance, ClientSession):
                    await _courtesy_cancel(instance, record.request_id, "caller cancelled")
                raise
            except McpError as exc:
                if exc.error.code == _READ_TIMEOUT_CODE:
                    record.note_cancel(CANCEL_REASON_TIMEOUT)
                    if self._courtesy_cancel and isinstance(instance, ClientSession):
                        await _courtesy_cancel(instance, record.request_id, "timed out")
                else:
                    record.note_answer(error_answer(exc.error.code, exc.error.message))
                raise
            note_result(record, result)
            return result
