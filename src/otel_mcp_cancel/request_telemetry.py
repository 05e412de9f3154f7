"""What a server span and a client span share: start it, make it current, classify, describe, end, measure.

Every entry point is contained: a failure in telemetry is logged once per kind and never reaches the
MCP server or client. Subclasses add what only their side knows (the server's ghosts).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.metrics import Histogram
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from otel_mcp_cancel.attributes import (
    captured_content,
    method_attributes,
    metric_attributes,
    named_task,
    request_attributes,
    span_name,
    target_name,
    tool_arguments,
    verdict_attributes,
)
from otel_mcp_cancel.conventions import (
    EVENT_REQUEST_CANCELLED,
    GEN_AI_TOOL_CALL_ARGUMENTS,
    GEN_AI_TOOL_CALL_RESULT,
    MCP_CANCEL_REASON,
    MCP_PROTOCOL_VERSION,
    MCP_TASK_ID,
    OTHER,
    OUTCOME_CANCELLED,
    TOOLS_CALL,
)
from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.outcome import Verdict, classify
from otel_mcp_cancel.request_state import RequestRecord, metric_fields
from otel_mcp_cancel.user_hooks import UserHooks


@dataclass(frozen=True)
class SpanOptions:
    """What the user chose at instrument() time, for every span of either side."""

    cancelled_is_error: bool  # OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS=error
    capture_content: bool  # OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true
    user_hooks: UserHooks


class RequestTelemetry:
    kind: SpanKind
    role: str  # names the activity in a contained fault's log line

    def __init__(
        self,
        tracer: Tracer,
        duration: Histogram,
        current: contextvars.ContextVar[RequestRecord | None],
        options: SpanOptions,
    ) -> None:
        self._tracer = tracer
        self._duration = duration
        self._current = current
        self._cancelled_is_error = options.cancelled_is_error
        self._capture_content = options.capture_content
        self._user_hooks = options.user_hooks
        self.stopped = False  # uninstrument() ran: the hooks that would see answers are gone

    def parent(self, params: Any) -> Context | None:
        """The context to parent the span on; None: the ambient one."""
        return None

    def open(self, method: str, params: Any, request_id: object, network_transport: str | None) -> RequestRecord | None:
        """Start the span for a request; None when instrumentation is suppressed or fails."""
        if not is_instrumentation_enabled():
            return None
        with contained(f"opening a {self.role} span"):
            known, target = self.knows_method(method), target_name(params)
            span = self._tracer.start_span(
                span_name(method if known else OTHER, None, target_registered=False),
                context=self.parent(params),
                kind=self.kind,
                attributes=request_attributes(method, known, params, target, request_id, network_transport),
            )
            record = RequestRecord(method, params, request_id, network_transport, span, known, target)
            record.task_id = named_task(method, params)
            self._user_hooks.on_request(self.role, record)
            return record
        return None

    @contextmanager
    def serving(self, record: RequestRecord) -> Iterator[RequestRecord]:
        """Make the record and its span current while the request runs, then finish it."""
        record_token = self._current.set(record)
        context_token = otel_context.attach(trace.set_span_in_context(record.span))
        try:
            yield record
        finally:
            try:  # finished in the span's context: the ghost WARNING and the metrics' exemplars point at it
                self.finish(record)
            finally:
                otel_context.detach(context_token)
                self._current.reset(record_token)

    def finish(self, record: RequestRecord) -> None:
        try:
            if self.stopped and record.answer is None and not record.cancelled:
                return  # in flight across uninstrument(), its answer unseen: no verdict rather than a wrong one
            self._conclude(record)
        finally:
            if record.span.is_recording():  # whatever failed above, the span still ends
                with contained(f"ending a {self.role} span"):
                    record.span.end()

    def _conclude(self, record: RequestRecord) -> None:
        """Classify, describe, measure and end. Each part is contained on its own: a failing detail
        (a lookup, a risk, a hook) loses only itself, never the name, outcome, status or duration."""
        with contained(f"resolving a {self.role} request"):
            self.resolve(record)
        verdict = None
        with contained(f"classifying a {self.role} request"):
            verdict = classify(
                record.handler,
                record.answer,
                record.cancelled,
                cancelled_is_error=self._cancelled_is_error,
                caller_faults_unset=self.kind is SpanKind.SERVER,
            )
        if verdict is None:
            return
        outcome = verdict_attributes(record.method, verdict)  # on the span and on the metric alike
        span = record.span
        with contained(f"naming a {self.role} span"):
            fold = record.method == TOOLS_CALL and not record.tool_registered
            method = record.method if record.method_known else OTHER
            span.update_name(span_name(method, record.target, target_registered=not fold))
        with contained(f"recording a {self.role} outcome"):
            # One call: each set_attributes pays the SDK's lock and value checks.
            named = {} if self.knows_method(record.method) else method_attributes(record.method, record.method_known)
            version = {} if record.protocol_version is None else {MCP_PROTOCOL_VERSION: record.protocol_version}
            task = {} if record.task_id is None else {MCP_TASK_ID: record.task_id}
            span.set_attributes({**named, **version, **task, **outcome})
            if verdict.span_error:
                span.set_status(Status(StatusCode.ERROR, verdict.description))
        with contained(f"describing a {self.role} span"):
            self._describe_span(record, verdict)
        with contained(f"annotating a {self.role} span"):
            self.annotate(record, verdict)
        self._user_hooks.on_response(self.role, record, verdict)  # after ours: the user's word is last
        with contained(f"measuring a {self.role} request"):
            attributes = metric_attributes(*metric_fields(record), tuple(outcome.items()))
            self._duration.record(time.perf_counter() - record.started, attributes)
        with contained(f"ending a {self.role} span"):
            span.end()  # last: a span processor that raises here costs no measurement

    def record_duration(self, seconds: float, attributes: dict[str, Any]) -> None:
        """A point of this side's operation-duration histogram that no request's end records: a task's."""
        self._duration.record(seconds, attributes)

    def knows_method(self, method: str) -> bool:
        """Whether a method keeps its name when a request arrives (else _OTHER until `resolve` knows better)."""
        return True

    def resolve(self, record: RequestRecord) -> None:
        """Fill in what is known only once the request is over."""

    def annotate(self, record: RequestRecord, verdict: Verdict) -> None:
        """Add this side's own events, links and measurements before the span ends."""

    def _describe_span(self, record: RequestRecord, verdict: Verdict) -> None:
        span = record.span
        if verdict.outcome == OUTCOME_CANCELLED:
            reason = {MCP_CANCEL_REASON: record.cancel_reason} if record.cancel_reason is not None else {}
            span.add_event(EVENT_REQUEST_CANCELLED, reason, timestamp=record.cancel_time_ns)
        if self._capture_content and record.method == TOOLS_CALL:
            arguments = tool_arguments(record.params)
            if arguments is not None:
                span.set_attribute(GEN_AI_TOOL_CALL_ARGUMENTS, captured_content(arguments))
            if record.result is not None:
                span.set_attribute(GEN_AI_TOOL_CALL_RESULT, captured_content(record.result))

    def metric_attributes(self, record: RequestRecord, keys: frozenset[str]) -> dict[str, Any]:
        """A new dict of the request's shared metric attributes named in `keys` (ghost and retry counters)."""
        return {key: value for key, value in metric_attributes(*metric_fields(record)).items() if key in keys}
