"""Which calls repeat an earlier one: the same tool with the same arguments, soon after, in the same scope (a
server's session, for a ghost; a client, for a call it gave up on); and, across replicas, a fingerprint of each
call that lets a store join them.

Arguments are compared by an HMAC-SHA256 under a random key made when the
process starts and never exported; no argument value is stored. A table
holds at most CAPACITY calls, oldest out, and forgets a call once the window
has passed. The fingerprint is an HMAC-SHA256 under a key the replicas share,
cut to FINGERPRINT_LENGTH hex characters: exported, and never the arguments.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import secrets
import threading
import time
import weakref
from collections import OrderedDict
from typing import Any, NamedTuple

from opentelemetry.trace import SpanContext

CAPACITY = 10_000
DEFAULT_WINDOW_SECONDS = 300.0
FINGERPRINT_LENGTH = 32  # hex characters: 128 bits

_session_numbers: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_next_session_number = itertools.count(1)
_session_lock = threading.Lock()


def session_number(session: object) -> int:
    """A number for a session (or other scope) object that is never reused while the process lives (ids can be)."""
    with _session_lock:
        number = _session_numbers.get(session)
        if number is None:
            number = _session_numbers[session] = next(_next_session_number)
        return number


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
    seen_at: float
    call_span_id: int  # the span id of the call itself (a ghost found later has a span of its own): no retry of itself


class RecentCalls:
    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        # The calls remembered. Read without the lock to ask whether any is (an attribute, not a method: asked on
        # every request); while none is, a caller need not even look.
        self.held: OrderedDict[tuple[int, str, bytes], Remembered] = OrderedDict()

    def _fingerprint(self, scope: object, tool: str, arguments: Any) -> tuple[int, str, bytes]:
        return session_number(scope), tool, hmac.new(self._key, _canonical(arguments), hashlib.sha256).digest()

    def remember(self, scope: object, tool: str, arguments: Any, span_context: SpanContext, label: str,
                 call_span_id: int | None = None) -> None:
        key = self._fingerprint(scope, tool, arguments)
        call = span_context.span_id if call_span_id is None else call_span_id
        with self._lock:
            self.held.pop(key, None)
            self.held[key] = Remembered(span_context, label, time.monotonic(), call)
            while len(self.held) > CAPACITY:
                self.held.popitem(last=False)

    def find(self, scope: object, tool: str, arguments: Any) -> Remembered | None:
        """The call this one repeats, if any."""
        if not self.held:
            return None
        key = self._fingerprint(scope, tool, arguments)
        with self._lock:
            self._forget_expired()
            return self.held.get(key)

    def _forget_expired(self) -> None:
        horizon = time.monotonic() - self.window_seconds
        while self.held and next(iter(self.held.values())).seen_at < horizon:
            self.held.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self.held)
