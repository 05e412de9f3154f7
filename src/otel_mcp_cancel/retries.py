"""Which calls repeat an earlier one: the same tool with the same arguments, soon after, in the same scope (a
server's session, for a ghost; a client, for a call it gave up on); and, across replicas, a fingerprint of each
call that lets a store join them.

Arguments are compared by the hash of their repr (Python's string hash: SipHash under the process's own random
key), held in this process's memory only; no argument value is stored. A table (`memory.Memory`) holds at most
CAPACITY calls, oldest out, and forgets a call once the window has passed. The fingerprint is an HMAC-SHA256
under a key the replicas share, cut to FINGERPRINT_LENGTH hex characters: exported, and never the arguments.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any, NamedTuple

from opentelemetry.trace import SpanContext

from otel_mcp_cancel.memory import Memory

CAPACITY = 10_000  # in one scope and in all: a single busy session may fill it
FINGERPRINT_LENGTH = 32  # hex characters: 128 bits


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr).encode()


class CallFingerprints:
    """A call's fingerprint under the key the replicas share: the same tool and arguments, the same value."""

    def __init__(self, key: str) -> None:
        self._key = key.encode()

    def of(self, tool: str, arguments: Any) -> str:
        digest = hmac.new(self._key, _canonical([tool, arguments]), hashlib.sha256).hexdigest()
        return digest[:FINGERPRINT_LENGTH]


class Remembered(NamedTuple):
    span_context: SpanContext
    label: str  # what it was: a ghost's risk, or why its caller gave up on it
    call_span_id: int  # the span id of the call itself (a ghost found later has a span of its own): no retry of itself


CallKey = tuple[str, int]  # a tool, and the hash of its arguments' repr


class RecentCalls:
    """Calls remembered for the calls that repeat them, by scope (a server's session, which is forgotten as it
    is collected; a client), tool and a digest of the arguments."""

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._calls: Memory[Remembered] = Memory(CAPACITY, CAPACITY, window_seconds)

    @property
    def held(self) -> bool:
        """Whether any call is remembered: while none is, a caller need not even look (asked on every request)."""
        return self._calls.held

    @staticmethod
    def key_of(tool: str, arguments: Any) -> CallKey:
        # Of the arguments' repr, not a canonical form: a retry comes from the same client, in the same session,
        # which sends the same arguments the same way; and this is made for every answered call (a cancel may
        # yet cross it), so by the cheapest keyed hash at hand.
        return tool, hash(repr(arguments))

    def remember(self, scope: object, key: CallKey, span_context: SpanContext, label: str,
                 call_span_id: int | None = None) -> None:
        call = span_context.span_id if call_span_id is None else call_span_id
        self._calls.put(scope, key, Remembered(span_context, label, call))

    def find(self, scope: object, key: CallKey) -> Remembered | None:
        """The call this one repeats, if any."""
        return self._calls.peek(scope, key)

    def clear(self) -> None:
        self._calls.clear()

    def __len__(self) -> int:
        return len(self._calls)
