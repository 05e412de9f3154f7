"""The client's side: one CLIENT span and `mcp.client.operation.duration` per outbound request, and its
sessions' durations."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Tracer

from otel_mcp_cancel import observers
from otel_mcp_cancel.answers import Answer
from otel_mcp_cancel.attributes import bounded
from otel_mcp_cancel.conventions import (
    CANCEL_REASON_TIMEOUT,
    GHOST_KIND_LATE_ANSWER,
    INITIALIZE,
)
from otel_mcp_cancel.ghost_reporting import GhostEmitter
from otel_mcp_cancel.instruments import Instruments
from otel_mcp_cancel.late_answers import GivenUpCalls
from otel_mcp_cancel.messages import message_field
from otel_mcp_cancel.outcome import late_answer
from otel_mcp_cancel.request_state import RequestRecord, current_client_record
from otel_mcp_cancel.request_telemetry import RequestTelemetry, SpanOptions
from otel_mcp_cancel.retries import RecentCalls
from otel_mcp_cancel.serving import WaitingSpan
from otel_mcp_cancel.session_telemetry import SessionTelemetry
from otel_mcp_cancel.task_requests import TaskRequests
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
        self.observers = (
            ("recording why a call was given up", observers.cancel_reasons),
            observers.client_retries(given_up, self),  # a client's own calls, in any of its sessions
            observers.client_tasks(TaskRequests(self.tasks)),
            observers.round_trips(self.round_trips),
        )

    def waiting_span(self) -> WaitingSpan | None:
        current = trace.get_current_span()
        return current if isinstance(current, WaitingSpan) else None

    def resolve(self, record: RequestRecord) -> None:
        # The tool names a client sends are its own code's choice, not a peer's: they are not folded.
        record.tool_registered = True
        # Named in its `initialize` result, or in a 2026-era result's `_meta` stamp.
        self.resolve_peer(record, record.result, keep=True)
        if record.method in VERSION_METHODS and record.result is not None:
            version = message_field(record.result, "protocolVersion")
            if isinstance(version, str):  # negotiated: on this span, and on its session's later requests
                record.protocol_version = bounded(version)
                if record.in_session is not None:
                    record.in_session.protocol_version = record.protocol_version

    def timed_out(self, record: RequestRecord) -> bool:
        return record.cancel_reason == CANCEL_REASON_TIMEOUT  # the client's reasons are its own: timeout | caller

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
