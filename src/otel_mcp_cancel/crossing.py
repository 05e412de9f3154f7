"""Answers a caller's cancel may cross on the wire.

A server whose event loop is blocked (synchronous work inside an `async` tool: sqlite, a subprocess, a
conversion) writes its answer and only then reads the cancel its caller sent meanwhile. The caller's SDK had
stopped waiting: it throws the answer away and tells its caller "cancelled", though the work was done. A cancel
read for a tools/call this session answered moments ago is that crossing. Each session remembers its last
MAX_REMEMBERED answered tools/calls, for CROSSING_SECONDS each; a cancel for one of them is taken once.

mcp 1.x also drops a cancel read before its request's handler began (`RequestResponder.cancel` raises, and the
receive loop logs and goes on): that call then runs and answers a caller that had given up, the same crossing the
other way round. Such a cancel is remembered as unheard, and the answer that follows is taken as crossed.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from typing import Any

from otel_mcp_cancel.request_state import RequestRecord

MAX_REMEMBERED = 64  # answered tools/calls per session
CROSSING_SECONDS = 10.0  # a cancel crosses an answer written moments before it is read, not minutes


class AnsweredCalls:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_session: weakref.WeakKeyDictionary[Any, OrderedDict[str, tuple[RequestRecord, float]]] = (
            weakref.WeakKeyDictionary())
        self._unheard: weakref.WeakKeyDictionary[Any, OrderedDict[str, float]] = weakref.WeakKeyDictionary()

    def remember(self, record: RequestRecord) -> bool:
        """`record`'s answer is being written. True when its caller's cancel was read before and went unheard."""
        session = record.session
        if session is None or record.request_id is None:
            return False
        key, now = str(record.request_id), time.monotonic()
        with self._lock:
            answered = self._by_session.get(session)
            if answered is None:
                answered = self._by_session[session] = OrderedDict()
            answered[key] = (record, now)
            if len(answered) > MAX_REMEMBERED:
                answered.popitem(last=False)
            unheard = self._unheard.get(session)
            cancelled_at = unheard.pop(key, None) if unheard is not None else None
        return cancelled_at is not None and now - cancelled_at <= CROSSING_SECONDS

    def unheard(self, session: Any, request_id: object) -> None:
        """A cancel for `request_id` was read before its handler began, and the SDK dropped it."""
        if session is None or request_id is None:
            return
        with self._lock:
            unheard = self._unheard.get(session)
            if unheard is None:
                unheard = self._unheard[session] = OrderedDict()
            unheard[str(request_id)] = time.monotonic()
            if len(unheard) > MAX_REMEMBERED:
                unheard.popitem(last=False)

    def crossed(self, session: Any, request_id: object) -> RequestRecord | None:
        """The tools/call of `session` a cancel for `request_id` crossed, answered within CROSSING_SECONDS; taken."""
        with self._lock:
            answered = self._by_session.get(session)
            found = answered.pop(str(request_id), None) if answered is not None else None
        if found is None or time.monotonic() - found[1] > CROSSING_SECONDS:
            return None
        return found[0]
