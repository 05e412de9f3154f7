"""Answers a caller's cancel may cross on the wire.

A server whose event loop is blocked (synchronous work inside an `async` tool: sqlite, a subprocess, a
conversion) writes its answer and only then reads the cancel its caller sent meanwhile. The caller's SDK had
stopped waiting: it throws the answer away and tells its caller "cancelled", though the work was done. A cancel
read for a tools/call this session answered moments ago is that crossing. Each session remembers its last
MAX_REMEMBERED answered tools/calls, for CROSSING_SECONDS each; a cancel for one of them is taken once.

mcp 1.x also drops a cancel read before its request's handler began (`RequestResponder.cancel` raises, and the
receive loop logs and goes on): that call then runs and answers a caller that had given up, the same crossing the
other way round. Such a cancel is remembered as unheard, and the answer that follows is taken as crossed.

A crossed ghost is emitted once its call is concluded (its tool's name then known to be served or not): at the
conclusion, for a cancel read before it; at the cancel, from what the conclusion left, for one read after.
"""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.trace import SpanContext

from otel_mcp_cancel import outcome
from otel_mcp_cancel.ghost_reporting import GhostSubject
from otel_mcp_cancel.memory import Memory
from otel_mcp_cancel.request_state import RequestRecord

MAX_REMEMBERED = 64  # answered tools/calls per session
MAX_SESSIONS_REMEMBERED = 1024  # sessions' worth of them in all
CROSSING_SECONDS = 10.0  # a cancel crosses an answer written moments before it is read, not minutes


class AnsweredCall:
    """A tools/call whose answer was written: its span, and, once it was concluded, its ghost's subject."""

    __slots__ = ("call", "subject", "handler_outcome", "crossed")

    def __init__(self, call: SpanContext) -> None:
        self.call = call
        self.subject: GhostSubject | None = None  # set as it is concluded
        self.handler_outcome: str | None = None  # what its handler did, if a crossing would make it a ghost
        self.crossed = False  # a cancel for it was read before it was concluded


# Reports a crossed ghost: (its subject, its handler's outcome, the session it came in).
Report = Callable[[GhostSubject, str, object], None]


class Crossings:
    def __init__(self) -> None:
        self._answered: Memory[AnsweredCall] = Memory(MAX_REMEMBERED, MAX_REMEMBERED * MAX_SESSIONS_REMEMBERED,
                                                      CROSSING_SECONDS)
        self._unheard: Memory[bool] = Memory(MAX_REMEMBERED, MAX_REMEMBERED * MAX_SESSIONS_REMEMBERED,
                                             CROSSING_SECONDS)

    def answering(self, record: RequestRecord) -> None:
        """`record`'s (a tools/call's) answer is being written."""
        session, request_id = record.session, record.request_id
        if session is None or request_id is None:
            return
        key = str(request_id)
        if self._unheard.held and self._unheard.take(session, key):  # its caller's cancel came first, unheard
            record.crossed = True
            return
        entry = AnsweredCall(record.span.get_span_context())
        self._answered.put(session, key, entry)
        record.answered_call = entry

    def unheard(self, session: object, request_id: object) -> None:
        """A cancel for `request_id` was read before its handler began, and the SDK dropped it."""
        if session is not None and request_id is not None:
            self._unheard.put(session, str(request_id), True)

    def cancel_read(self, session: object, request_id: object, report: Report) -> SpanContext | None:
        """A cancel for `request_id` was read in `session`, which no longer has it in flight: the span of the call
        it crossed, if it crossed one, whose ghost is reported now or as it is concluded."""
        entry = self._answered.take(session, str(request_id)) if self._answered.held else None
        if entry is None:
            return None
        if entry.subject is None:
            entry.crossed = True
        elif entry.handler_outcome is not None:
            report(entry.subject, entry.handler_outcome, session)
        return entry.call

    def concluded(self, record: RequestRecord, subject: Callable[[RequestRecord], GhostSubject],
                  report: Report) -> None:
        """`record` (a tools/call) was concluded: a crossing read before now is reported; else what a cancel
        read later needs is left for it."""
        entry = record.answered_call
        crossed = record.crossed or (entry is not None and entry.crossed)
        handler_outcome = outcome.crossed(record.handler, record.answer) if crossed or entry is not None else None
        if handler_outcome is None:  # no crossing, or one of an answer that says nothing ran
            return
        if crossed:
            report(subject(record), handler_outcome, record.session)
        elif entry is not None:
            entry.subject, entry.handler_outcome = subject(record), handler_outcome
