"""One task as it is followed (`task_telemetry`): the call that created it, its span, and what is known of its
work, its status and its caller."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.trace import Span

from otel_mcp_cancel.answers import HandlerEnd
from otel_mcp_cancel.outcome import Verdict
from otel_mcp_cancel.request_state import RequestRecord


@dataclass(eq=False)
class TaskRecord:
    task_id: str
    creation: RequestRecord  # the tools/call that created it: its tool, session and arguments, its metric fields
    span: Span
    work_watched: bool  # an engine's hook reports how the work ends
    bound_to_session: bool  # the engine serves its result only to the session that created it
    kept_elsewhere: bool = False  # its work and result are held by a store that outlives this process
    work: HandlerEnd | None = None
    status: str | None = None  # the terminal status, once reached
    last_status: str | None = None  # the last status an event reported
    result_pending: bool = False  # told `completed` with no result inline: only its result can say isError
    is_tool_error: bool = False
    outcome_seen: bool = False  # its caller was told how it ended: its result, or a terminal status polled
    # A client's session ended before it learned how the task ended, and why: its own code left (caller), its
    # last wait for the task was its own timeout (timeout), or the connection closed (GAVE_UP_CONNECTION_LOST).
    gave_up: str | None = None
    last_wait: str | None = None  # how the client's last request about the task ended unanswered, if it did
    session_over: bool = False  # the creating session ended: a result it did not fetch is out of reach
    expired: bool = False  # its result's time to live ran out before its caller was told
    process_ended: bool = False  # the server's process is exiting: nothing in it waits any longer
    ended: bool = False  # its span was ended here (an expiry's timer thread and the event loop may race to)
    ghosted: bool = False  # a late cancel already counted its work as a ghost
    announced: bool = False  # its creating answer was written: an engine may begin (and finish) it before
    ttl: float | None = None  # seconds its result is kept, from its creating answer
    expires_at: float | None = None  # when its result expires, once it finished unasked
    verdict: Verdict | None = None
    took: float | None = None  # seconds from the call to its terminal status
    measured: bool = False  # its span named by its tool and its duration point recorded

    @property
    def settled(self) -> bool:
        return self.verdict is not None
