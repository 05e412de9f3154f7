"""Calls a client gave up on, remembered for the answer that may still come.

A client that cancelled a call or whose timeout fired tells its caller "cancelled"; a server that answers the call
anyway (mcp 1.x with a blocked loop, the Go SDK's server) did the work. Its answer reaches the client's SDK, which
no longer waits for that id and throws it away. Each session (by the stream it sends on) remembers the last
MAX_REMEMBERED calls it gave up on, for LATE_SECONDS each; an answer for one is taken once.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from otel_mcp_cancel.request_state import RequestRecord

MAX_REMEMBERED = 64  # given-up calls per session
MAX_SESSIONS = 1024  # sessions with given-up calls: a session that never ended is forgotten past these
LATE_SECONDS = 600.0  # a slow tool answers minutes after its caller's timeout, not hours


class GivenUpCalls:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # By the id of the stream the session sends on (streams are not weak-referenceable; `forget` as it ends).
        self._by_session: OrderedDict[int, OrderedDict[str, tuple[RequestRecord, float]]] = OrderedDict()

    def remember(self, record: RequestRecord) -> None:
        """`record`'s caller gave up on it (cancelled, or its timeout fired)."""
        if record.session is None or record.request_id is None:
            return
        with self._lock:
            calls = self._by_session.get(id(record.session))
            if calls is None:
                calls = self._by_session[id(record.session)] = OrderedDict()
                if len(self._by_session) > MAX_SESSIONS:
                    self._by_session.popitem(last=False)
            calls[str(record.request_id)] = (record, time.monotonic())
            if len(calls) > MAX_REMEMBERED:
                calls.popitem(last=False)

    def answered(self, session: object, request_id: object) -> RequestRecord | None:
        """The call of `session` an answer for `request_id` belongs to, given up within LATE_SECONDS; taken."""
        with self._lock:
            calls = self._by_session.get(id(session))
            found = calls.pop(str(request_id), None) if calls is not None else None
        # The record holds its stream, so no other stream has taken that id meanwhile.
        if found is None or found[0].session is not session or time.monotonic() - found[1] > LATE_SECONDS:
            return None
        return found[0]

    def forget(self, session: object) -> None:
        """`session` ended: no answer reaches it any more."""
        with self._lock:
            self._by_session.pop(id(session), None)

    @property
    def held(self) -> bool:
        return bool(self._by_session)
