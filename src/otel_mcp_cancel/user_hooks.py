"""The user's own hooks, as in the contrib instrumentations: `instrument(request_hook=..., response_hook=...)`.

`request_hook(span, request)` runs when a request's span has started; `response_hook(span, request,
response)` runs once its outcome is on the span, before it ends. Both run for server and client spans
(`request.side` tells which). `request.params` is the request's params as sent: it holds tool
arguments, so what a hook records is the user's choice. A hook that raises is logged as a fault
and skipped; the request and its span go on unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from opentelemetry.trace import Span

from otel_mcp_cancel.conventions import OUTCOME_CANCELLED
from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.outcome import Verdict
from otel_mcp_cancel.request_state import RequestRecord


class McpRequestInfo(NamedTuple):
    side: str  # "server" or "client"
    method: str
    params: Any
    request_id: object  # None where the SDK assigns it later: a 2.x client's request, when request_hook runs


class McpResponseInfo(NamedTuple):
    # ok | failed | cancelled, for any method (a tools/call span carries it as tool.outcome); None for a
    # tools/call answered with a task's creation, whose outcome comes with the task's end
    outcome: str | None
    cancel_reason: str | None
    ghost: bool  # the handler finished but its answer never reached the wire


RequestHook = Callable[[Span, McpRequestInfo], None]
ResponseHook = Callable[[Span, McpRequestInfo, McpResponseInfo], None]


class UserHooks:
    __slots__ = ("_request_hook", "_response_hook", "installed")

    def __init__(self, request_hook: RequestHook | None = None, response_hook: ResponseHook | None = None) -> None:
        self._request_hook = request_hook if callable(request_hook) else None
        self._response_hook = response_hook if callable(response_hook) else None
        self.installed = self._request_hook is not None or self._response_hook is not None

    def on_request(self, side: str, record: RequestRecord) -> None:
        if self._request_hook is not None:
            with contained("running the request_hook"):
                self._request_hook(record.span, _request_info(side, record))

    def on_response(self, side: str, record: RequestRecord, verdict: Verdict) -> None:
        if self._response_hook is not None:
            with contained("running the response_hook"):
                reason = record.cancel_reason if verdict.outcome == OUTCOME_CANCELLED else None
                response = McpResponseInfo(verdict.outcome, reason, verdict.is_ghost)
                self._response_hook(record.span, _request_info(side, record), response)


def _request_info(side: str, record: RequestRecord) -> McpRequestInfo:
    return McpRequestInfo(side, record.method, record.params, record.request_id)
