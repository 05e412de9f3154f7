"""What a server span and a client span share: start it, make it current, classify, describe, end, measure.

Every entry point is contained: a failure in telemetry is logged as a fault (`faults`) and never reaches the
MCP server or client. Subclasses add what only their side knows (the server's ghosts).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.metrics import Histogram, MeterProvider
from opentelemetry.trace import SpanKind, Tracer, TracerProvider

from otel_mcp_cancel import conclusion, peers
from otel_mcp_cancel.attributes import (
    bounded,
    captured_content,
    exception_attributes,
    method_attributes,
    request_attributes,
    span_name,
    verdict_attributes,
)
from otel_mcp_cancel.conventions import (
    EVENT_EXCEPTION,
    EVENT_REQUEST_CANCELLED,
    GEN_AI_TOOL_CALL_ARGUMENTS,
    GEN_AI_TOOL_CALL_RESULT,
    JSONRPC_REQUEST_ID,
    MCP_PROTOCOL_VERSION,
    MCP_TASK_ID,
    NAMED_TARGET_METHODS,
    OTHER,
    OUTCOME_CANCELLED,
    SUBSCRIPTION_METHODS,
    TOOL_CANCEL_MESSAGE,
    TOOL_CANCEL_REASON,
    TOOLS_CALL,
)
from otel_mcp_cancel.faults import fault
from otel_mcp_cancel.liveness import Recording
from otel_mcp_cancel.messages import request_fields, tool_arguments
from otel_mcp_cancel.observers import Observer
from otel_mcp_cancel.outcome import Verdict, classify, classify_subscription
from otel_mcp_cancel.request_state import CurrentRecord, RequestRecord
from otel_mcp_cancel.round_trips import InterimAnswers
from otel_mcp_cancel.serving import WaitingSpan, ambient_link, end_span
from otel_mcp_cancel.task_telemetry import TaskTelemetry
from otel_mcp_cancel.user_hooks import UserHooks


class SpanOptions(NamedTuple):
    """What the user chose at instrument() time, for every span of either side."""

    cancelled_is_error: bool  # OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS=error
    capture_content: bool  # OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true
    user_hooks: UserHooks
    recording: Recording  # whether the providers given (or the global ones) record anything
    tracer_provider: TracerProvider | None = None  # the one given to instrument(); None: the global one
    meter_provider: MeterProvider | None = None  # likewise


class RequestTelemetry:
    kind: SpanKind
    role: str  # names the activity in a contained fault's log line
    # Whether a span can take its target's name as it starts (else when the target is known to be served).
    names_target_at_start = False
    # The span names of the targets this side found served as requests ended (the server's): a span of one
    # takes its name as it starts, and keeps it unless the target is no longer served as it ends.
    served_targets: frozenset[str] | set[str] = frozenset()
    # The methods that keep their name when a request arrives (else _OTHER until `resolve` knows better);
    # None: every method (data, not a method: asked twice on every request).
    known_methods: frozenset[str] | None = None
    # The context a request's `request_fields` say to parent its span on (a server's peer's trace context), or
    # None: the ambient one. Data, not a method, as above.
    parent_context: Callable[[Mapping[str, Any] | None], Context | None] | None = None
    tasks: TaskTelemetry  # the side's tasks, made by the side

    def __init__(
        self,
        tracer: Tracer,
        duration: Histogram,
        current: CurrentRecord,
        options: SpanOptions,
    ) -> None:
        self.tracer = tracer
        self.tracer_provider = options.tracer_provider
        self._duration = duration
        self._measured = f"{self.role} request"  # what a fault measuring one names
        self.current = current
        self._cancelled_is_error = options.cancelled_is_error
        self._capture_content = options.capture_content
        # None when the user gave no hook: nothing to call on every request.
        self._user_hooks = options.user_hooks if options.user_hooks.installed else None
        self._recording = options.recording
        # A user's hook and content capture are given a request's params as sent; else a hook may hand `open` a
        # cheaper view of them that holds what the telemetry reads.
        self.params_as_sent = self._user_hooks is not None or self._capture_content
        self.stopped = False  # uninstrument() ran: the hooks that would see answers are gone
        # A hook set opens spans around requests for them to take (FastMCP's client spans): only then is one
        # looked for, on every request.
        self.spans_wait = False
        # A hook set finds the request being served or sent by `current`: only then is it set, on every request.
        self.records_current = False
        # Told of the answer of a request that names a task, as it is written (see `RequestRecord.on_result`).
        self.on_task_answer: Callable[[RequestRecord], None] | None = None
        # A side that names its target as a span starts and knows every method names its spans for good then:
        # no name is sought as they end.
        self._names_final_at_start = self.names_target_at_start and self.known_methods is None
        self._caller_faults_unset = self.kind is SpanKind.SERVER  # see `classify`
        self.round_trips = InterimAnswers()
        self.peers = peers.clients() if self.kind is SpanKind.SERVER else peers.servers()  # as they name themselves
        # What the side adds to a concluded request (`observers`), in order: set by the side.
        self.observers: tuple[Observer, ...] = ()

    def stop(self) -> None:
        """uninstrument() ran: the hooks that would see answers are gone (each hook set says so; once is enough)."""
        self.stopped = True
        self.tasks.stop()

    def traced(self) -> bool:
        """Whether a request arriving now gets a span: something records, and instrumentation is not
        suppressed. A hook that must prepare what `open` takes (a 1.x model's wire form) asks first."""
        recording = self._recording
        return (recording.known or recording()) and is_instrumentation_enabled()

    def open(
        self,
        method: str,
        params: Any,
        request_id: object,
        network_transport: str | None,
        attributes: Mapping[str, Any] | None = None,
        *,
        checked: bool = False,
    ) -> RequestRecord | None:
        """Start the span for a request (with `attributes` besides the request's own); None when nothing
        records, instrumentation is suppressed, or it fails. `checked`: the hook asked `traced()` just now."""
        if not checked and not self.traced():
            return None
        try:
            fields = params if type(params) is dict else request_fields(params)  # a hook's usual dict: no call
            known = self.known_methods is None or method in self.known_methods
            start_attributes, target, task_id, target_name = request_attributes(method, known, fields, request_id,
                                                                                network_transport)
            named = target_name is not None and (self.names_target_at_start or target_name in self.served_targets)
            name = target_name if named and target_name is not None else span_name(
                method if known else OTHER, None, target_registered=True)
            if attributes:
                start_attributes.update(attributes)
            holder = self.waiting_span() if self.spans_wait else None
            claimed = holder.claim(method) if holder is not None else None
            if claimed is None:
                parent = self.parent_context(fields) if self.parent_context is not None else None
                span = self.tracer.start_span(name, context=parent, kind=self.kind, attributes=start_attributes,
                                               links=None if parent is None else ambient_link(parent))
            else:  # another instrumentation's span, opened for this request: now ours
                span = claimed
                span.update_name(name)
                span.set_attributes(start_attributes)
            record = RequestRecord(method, params, request_id, network_transport, span, known, target, name)
            if holder is not None and claimed is not None:  # its holder ends it
                record.ends_span = False
                holder.claimed_by(record, self._capture_content)
            if named:
                record.target_named = True
            if not known:  # its method's attributes wait for its end, when it is known whether it is served
                record.method_named_late = True
            if task_id is not None:  # most requests name no task
                record.task_id, record.on_result = task_id, self.on_task_answer
            if self._user_hooks is not None:
                self._user_hooks.on_request(self.role, record)
            return record
        except Exception:
            fault(f"opening a {self.role} span")
        return None

    def waiting_span(self) -> WaitingSpan | None:
        """A span opened around this request by another instrumentation, offered to be its span."""
        return None

    def conclude(self, record: RequestRecord) -> bool:
        """Classify, describe, measure and end; whether it ended the span. Each part is contained on its own:
        a failing detail (a lookup, a risk, a hook) loses only itself, never the name, outcome, status or
        duration."""
        role = self.role
        try:
            self.resolve(record)
        except Exception:
            fault(f"resolving a {role} request")
        try:
            cancelled = record.cancelled
            if record.method in SUBSCRIPTION_METHODS:
                verdict = classify_subscription(record.answer, caller_faults_unset=self._caller_faults_unset)
            else:
                verdict = classify(record.handler, record.answer, cancelled,
                                   timed_out=cancelled and self.timed_out(record),
                                   cancelled_is_error=self._cancelled_is_error,
                                   caller_faults_unset=self._caller_faults_unset)
        except Exception:
            fault(f"classifying a {role} request")
            return False
        outcome = verdict_attributes(record.method, verdict)  # on the span and on the metric alike
        span = record.span
        # A span named with its target as it started keeps its name while the target is served.
        if not self._names_final_at_start and not (record.target_named and record.tool_registered):
            try:
                fold = record.method in NAMED_TARGET_METHODS and not record.tool_registered
                name = span_name(record.method if record.method_known else OTHER, record.target, not fold)
                if name != record.name:
                    span.update_name(name)
            except Exception:
                fault(f"naming a {role} span")
        try:
            attributes = method_attributes(record.method, record.method_known) if record.method_named_late else {}
            if record.request_id_late:
                attributes[JSONRPC_REQUEST_ID] = bounded(str(record.request_id))
            if record.protocol_version is not None:
                attributes[MCP_PROTOCOL_VERSION] = record.protocol_version
            if record.task_id is not None:
                attributes[MCP_TASK_ID] = record.task_id
            if record.peer is not None:
                attributes.update(record.peer.span_attributes)
            attributes.update(outcome)
        except Exception:
            fault(f"describing a {role} span")
            attributes = dict(outcome)
        conclusion.describe(span, attributes, verdict, role)
        if verdict.outcome == OUTCOME_CANCELLED or record.exception is not None or self._capture_content:
            try:
                self._describe_span(record, verdict)
            except Exception:
                fault(f"describing a {role} span")
        for activity, observe in self.observers:  # each contained on its own
            try:
                observe(record, verdict)
            except Exception:
                fault(activity)
        if self._user_hooks is not None:
            self._user_hooks.on_response(role, record, verdict)  # after ours: the user's word is last
        # A subscription's life is not an operation's latency: its span alone says how long it lasted.
        if record.method not in SUBSCRIPTION_METHODS:
            conclusion.measure(self._duration.record, time.perf_counter() - record.started, record.metric_attributes,
                               outcome, self._measured)
        if record.ends_span:
            conclusion.end(span, role)
        return True

    def conclude_later(self, record: RequestRecord) -> None:
        """Conclude a request its serving task has left (see `stdio_wire`), in its span's context as `Serving`
        does; the span ends whatever fails."""
        ended = False
        token = otel_context.attach(trace.set_span_in_context(record.span))
        try:
            ended = self.conclude(record)
        finally:
            otel_context.detach(token)
            if not ended:
                end_span(self, record)

    def handler_ended_late(self, record: RequestRecord) -> None:
        """The handler of a request concluded as its caller left has ended."""

    def record_duration(self, seconds: float, attributes: dict[str, Any]) -> None:
        """A point of this side's operation-duration histogram that no request's end records: a task's."""
        self._duration.record(seconds, attributes)

    def timed_out(self, record: RequestRecord) -> bool:
        """Whether a cancel was this side's own timeout giving up (only a client knows its own)."""
        return False

    def resolve(self, record: RequestRecord) -> None:
        """Fill in what is known only once the request is over."""

    def resolve_peer(self, record: RequestRecord, message: Any, keep: bool) -> None:
        """The peer `record` came from (server) or went to (client): its session's, once a message named it; else
        as `message` names it, kept on the session for its later requests if `keep`."""
        session = record.in_session
        if session is not None and session.peer is not None:
            record.peer = session.peer
        elif message is not None:
            record.peer = self.peers.named_in(record.method, message)
            if keep and session is not None:
                session.peer = record.peer

    def _describe_span(self, record: RequestRecord, verdict: Verdict) -> None:
        span = record.span
        if verdict.outcome == OUTCOME_CANCELLED:
            # A client's reason is its own (timeout | caller); a server's is the peer's text.
            key = TOOL_CANCEL_REASON if self.kind is SpanKind.CLIENT else TOOL_CANCEL_MESSAGE
            reason = {key: record.cancel_reason} if record.cancel_reason is not None else {}
            span.add_event(EVENT_REQUEST_CANCELLED, reason, timestamp=record.cancel_time_ns)
        if record.exception is not None:
            span.add_event(EVENT_EXCEPTION, exception_attributes(record.exception, self._capture_content))
        if self._capture_content and record.method == TOOLS_CALL:
            arguments = tool_arguments(record.params)
            if arguments is not None:
                span.set_attribute(GEN_AI_TOOL_CALL_ARGUMENTS, captured_content(arguments))
            if record.result is not None:
                span.set_attribute(GEN_AI_TOOL_CALL_RESULT, captured_content(record.result))
