"""The client's side: one CLIENT span and `mcp.client.operation.duration` per outbound request, and its
sessions' durations."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Tracer

from otel_mcp_cancel.attributes import bounded, message_field, tool_arguments
from otel_mcp_cancel.conventions import (
    CANCEL_REASON_TIMEOUT,
    GHOST_KIND_LATE_ANSWER,
    INITIALIZE,
    OUTCOME_CANCELLED,
    TOOL_CANCEL_REASON,
    TOOL_RETRIED_CANCEL_REASON,
    TOOLS_CALL,
)
from otel_mcp_cancel.faults import fault
from otel_mcp_cancel.ghost_reporting import GhostEmitter
from otel_mcp_cancel.instruments import Instruments
from otel_mcp_cancel.late_answers import GivenUpCalls
from otel_mcp_cancel.outcome import Answer, Verdict, late_answer
from otel_mcp_cancel.request_state import RequestRecord, current_client_record
from otel_mcp_cancel.request_telemetry import RequestTelemetry, SpanOptions, WaitingSpan
from otel_mcp_cancel.retries import RecentCalls
from otel_mcp_cancel.session_telemetry import SessionTelemetry
from otel_mcp_cancel.task_telemetry import TaskTelemetry

# The answers that carry the protocol version a session speaks: the handshake's, and the 2026-07-28 discovery's.
VERSION_METHODS = frozenset({INITIALIZE, "server/discover"})


class ClientTelemetry(RequestTelemetry):
    kind = SpanKind.CLIENT
    role = "client"
    names_target_at_start = True  # the tool names a client sends are its own code's choice: never folded

    def __init__(self, tracer: Tracer, instruments: Instruments, options: SpanOptions, given_up: RecentCalls) -> None:
        super().__init__(tracer, instruments.client_operation_duration, current_client_record, options)
        self.given_up = given_up
        self.late_answers = GivenUpCalls()
        self.ghosts = GhostEmitter(tracer, instruments.ghost_responses)
        self.sessions = SessionTelemetry(instruments.client_session_duration)
        self.tasks = TaskTelemetry(tracer, self.record_duration, options.cancelled_is_error, ghosts=None)

    def waiting_span(self) -> WaitingSpan | None:
        current = trace.get_current_span()
        return current if isinstance(current, WaitingSpan) else None

    def resolve(self, record: RequestRecord) -> None:
        # The tool names a client sends are its own code's choice, not a peer's: they are not folded.
        record.tool_registered = True
        if record.method in VERSION_METHODS and record.result is not None:
            version = message_field(record.result, "protocolVersion")
            if isinstance(version, str):  # negotiated: on this span, and on its session's later requests
                record.protocol_version = bounded(version)
                if record.in_session is not None:
                    record.in_session.protocol_version = record.protocol_version

    def timed_out(self, record: RequestRecord) -> bool:
        return record.cancel_reason == CANCEL_REASON_TIMEOUT  # the client's reasons are its own: timeout | caller

    def annotate(self, record: RequestRecord, verdict: Verdict) -> None:
        reason = record.cancel_reason
        given_up = verdict.outcome == OUTCOME_CANCELLED and reason is not None
        # The client's reason is bounded (timeout | caller): an attribute too, so "our own timeouts" is a query.
        if given_up and reason is not None:
            record.span.set_attribute(TOOL_CANCEL_REASON, reason)
        if given_up or self.given_up.held:  # most calls: nothing to match, nothing to remember
            try:
                self.match_retry(record, given_up)
            except Exception:
                fault("matching a retry")
        if record.task_id is not None:  # most requests name no task
            try:
                self.tasks.observe(record, verdict)  # the client's view: what it was told of the task
                self.tasks.waited(record, verdict)
            except Exception:
                fault("following a task")

    def match_retry(self, record: RequestRecord, given_up: bool) -> None:
        """A call that repeats one this client gave up on, in any of its sessions (on another replica, the server
        cannot tell): its span links to that call's and says why it was given up on, so tail sampling keeps it
        and the server's span in its trace. Then a call given up on (`given_up`: by a cancel with this client's own
        reason) is remembered, for its own retries."""
        if record.method != TOOLS_CALL or record.target is None:
            return
        key = self.given_up.key_of(record.target, tool_arguments(record.params))
        repeated = self.given_up.find(self, key)
        if repeated is not None:
            record.span.add_link(repeated.span_context)
            record.span.set_attribute(TOOL_RETRIED_CANCEL_REASON, repeated.label)
        if given_up and record.cancel_reason is not None:
            self.given_up.remember(self, key, record.span.get_span_context(), record.cancel_reason)

    def gave_up(self, record: RequestRecord) -> None:
        """`record`'s caller gave up on it: an answer may still come (`answered_late`)."""
        self.late_answers.remember(record)

    def answered_late(self, session: object, request_id: object, answer: Answer) -> None:
        """An answer for `request_id` reached `session`, which no longer waits for it. If its call was given up on
        and the answer says the server did the work, that is a ghost the client sees (`tool.ghost_kind=late_answer`)
        on a span of its own, a child of the call's (ended) span."""
        subject = self.late_answers.answered(session, request_id)
        handler_outcome = late_answer(answer) if subject is not None else None
        if subject is not None and handler_outcome is not None:
            # Named by the id the answer carries: the one this client sent
            self.ghosts.emit(subject._replace(request_id=request_id), handler_outcome, GHOST_KIND_LATE_ANSWER,
                             "its caller gave up on the call")
