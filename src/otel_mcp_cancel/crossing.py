"""Answers a caller's cancel may cross on the wire.

A server whose event loop is blocked (synchronous work inside an `async` tool: sqlite, a subprocess, a
conversion) writes its answer and only then reads the cancel its caller sent meanwhile. The caller's SDK had
stopped waiting: it throws the answer away and tells its caller "cancelled", though the work was done. A cancel
read for a tools/call this session answered moments ago is that crossing. Each session remembers its last
MAX_REMEMBERED answered tools/calls, for CROSSING_SECONDS each; a cancel for one of them is taken once.
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

    def remember(self, record: RequestRecord) -> None:
        """`record`'s answer is being written."""
        session = record.session
        if session is None or record.request_id is None:
            return
        with self._lock:
            answered = self._by_session.get(session)
            if answered is None:
                answered = self._by_session[session] = OrderedDict()
            answered[str(record.request_id)] = (record, time.monotonic())
            if len(answered) > MAX_REMEMBERED:
                answered.popitem(last=False)

    def crossed(self, session: Any, request_id: object) -> RequestRecord | None:
        """The tools/call of `session` a cancel for `request_id` crossed, answered within CROSSING_SECONDS; taken."""
        with self._lock:
            answered = self._by_session.get(session)
            found = answered.pop(str(request_id), None) if answered is not None else None
        if found is None or time.monotonic() - found[1] > CROSSING_SECONDS:
            return None
        return found[0]
