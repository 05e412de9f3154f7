"""The 2026-07-28 multi-round-trip flow: a tools/call answered `input_required` (with an opaque `requestState`) is
completed by a new request that echoes that state with its caller's input. That request's span links to the
interim one. Each side remembers the states of its last MAX_REMEMBERED interim answers for ROUND_TRIP_SECONDS,
by a digest (a sealed state can be large); a state is taken once.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict

from opentelemetry.trace import SpanContext

MAX_REMEMBERED = 1024
ROUND_TRIP_SECONDS = 600.0  # a person answering an elicitation takes minutes, not hours


class InterimAnswers:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_state: OrderedDict[bytes, tuple[SpanContext, float]] = OrderedDict()

    def remember(self, state: str, interim: SpanContext) -> None:
        """An interim answer carrying `state` ended the span `interim`."""
        with self._lock:
            self._by_state[_digest(state)] = (interim, time.monotonic())
            if len(self._by_state) > MAX_REMEMBERED:
                self._by_state.popitem(last=False)

    def completed(self, state: str) -> SpanContext | None:
        """The interim answer's span a request echoing `state` completes, within ROUND_TRIP_SECONDS; taken."""
        with self._lock:
            found = self._by_state.pop(_digest(state), None)
        if found is None or time.monotonic() - found[1] > ROUND_TRIP_SECONDS:
            return None
        return found[0]


def _digest(state: str) -> bytes:
    return hashlib.sha256(state.encode("utf-8", "surrogatepass")).digest()
