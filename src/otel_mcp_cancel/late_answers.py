"""Calls a client gave up on, remembered for the answer that may still come.

A client that cancelled a call or whose timeout fired tells its caller "cancelled"; a server that answers the call
anyway (mcp 1.x with a blocked loop, the Go SDK's server) did the work. Its answer reaches the client's SDK, which
no longer waits for that id and throws it away. Each session (by the stream it sends on, forgotten as the session
ends) remembers the last MAX_REMEMBERED calls it gave up on, for LATE_SECONDS each, as the ghost's subject (never
the call's record or arguments); an answer for one is taken once.
"""

from __future__ import annotations

from otel_mcp_cancel.ghost_reporting import GhostEmitter, GhostSubject
from otel_mcp_cancel.memory import Memory
from otel_mcp_cancel.request_state import RequestRecord

MAX_REMEMBERED = 64  # given-up calls per session
MAX_SESSIONS = 1024  # sessions' worth of them in all
LATE_SECONDS = 600.0  # a slow tool answers minutes after its caller's timeout, not hours


class GivenUpCalls:
    def __init__(self) -> None:
        self._calls: Memory[GhostSubject] = Memory(MAX_REMEMBERED, MAX_REMEMBERED * MAX_SESSIONS, LATE_SECONDS)

    @property
    def held(self) -> bool:
        return self._calls.held

    def remember(self, record: RequestRecord) -> None:
        """`record`'s caller gave up on it (cancelled, or its timeout fired)."""
        if record.session is not None and record.request_id is not None:
            self._calls.put(record.session, str(record.request_id), GhostEmitter.client_subject(record))

    def answered(self, session: object, request_id: object) -> GhostSubject | None:
        """The call of `session` an answer for `request_id` belongs to, given up within LATE_SECONDS; taken."""
        return self._calls.take(session, str(request_id))

    def forget(self, session: object) -> None:
        """`session` ended: no answer reaches it any more."""
        self._calls.forget(session)
