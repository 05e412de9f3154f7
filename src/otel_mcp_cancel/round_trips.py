"""The 2026-07-28 multi-round-trip flow: a tools/call answered `input_required` (with an opaque `requestState`) is
completed by a new request that echoes that state with its caller's input. That request's span links to the
interim one. Each side remembers the states of its last MAX_REMEMBERED interim answers for ROUND_TRIP_SECONDS,
by a digest (a sealed state can be large); a state is taken once.
"""

from __future__ import annotations

import hashlib

from opentelemetry.trace import SpanContext

from otel_mcp_cancel.memory import Memory

MAX_REMEMBERED = 1024
ROUND_TRIP_SECONDS = 600.0  # a person answering an elicitation takes minutes, not hours


class InterimAnswers:
    def __init__(self) -> None:
        # By the process, not the session: a caller may complete the round trip on another connection.
        self.by_state: Memory[SpanContext] = Memory(MAX_REMEMBERED, MAX_REMEMBERED, ROUND_TRIP_SECONDS)

    def remember(self, state: str, interim: SpanContext) -> None:
        """An interim answer carrying `state` ended the span `interim`."""
        self.by_state.put(None, _digest(state), interim)

    def completed(self, state: str) -> SpanContext | None:
        """The interim answer's span a request echoing `state` completes, within ROUND_TRIP_SECONDS; taken."""
        return self.by_state.take(None, _digest(state))


def _digest(state: str) -> bytes:
    return hashlib.sha256(state.encode("utf-8", "surrogatepass")).digest()
