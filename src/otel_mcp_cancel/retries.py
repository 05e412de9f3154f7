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
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class Remembered:
    span_context: SpanContext
    label: str  # what it was: a ghost's risk, or why its caller gave up on it
    seen_at: float


class RecentCalls:
    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._calls: OrderedDict[tuple[int, str, bytes], Remembered] = OrderedDict()

    def _fingerprint(self, scope: object, tool: str, arguments: Any) -> tuple[int, str, bytes]:
        return session_number(scope), tool, hmac.new(self._key, _canonical(arguments), hashlib.sha256).digest()

    def remember(self, scope: object, tool: str, arguments: Any, span_context: SpanContext, label: str) -> None:
        key = self._fingerprint(scope, tool, arguments)
        with self._lock:
            self._calls.pop(key, None)
            self._calls[key] = Remembered(span_context, label, time.monotonic())
            while len(self._calls) > CAPACITY:
                self._calls.popitem(last=False)

    @property
    def holds_any(self) -> bool:
        """Whether any call is remembered (a lock-free read): while none is, a caller need not even look."""
        return bool(self._calls)

    def find(self, scope: object, tool: str, arguments: Any) -> Remembered | None:
        """The call this one repeats, if any."""
        if not self._calls:
            return None
        key = self._fingerprint(scope, tool, arguments)
        with self._lock:
            self._forget_expired()
            return self._calls.get(key)

    def _forget_expired(self) -> None:
        horizon = time.monotonic() - self.window_seconds
        while self._calls and next(iter(self._calls.values())).seen_at < horizon:
            self._calls.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._calls)
