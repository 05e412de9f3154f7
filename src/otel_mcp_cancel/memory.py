"""The one bounded memory every feature that remembers across requests keeps its table in.

A memory holds keyed values in scopes (a session, a stream; None for the process): at most `per_scope` in one
scope and `total` in all, oldest out, each for at most `max_age` seconds, an age enforced as values are written
as well as read, so nothing outlives its window just because nobody asks. A scope is held by its id, never by
itself: one that can be weakly referenced is forgotten as it is collected (a weak reference's callback, not
`weakref.finalize`, which registers an exit hook in the process), and any other is forgotten by `forget` as it
ends (or ages out). What goes in is a span context, a bounded label or a small summary
made for the purpose: never a request's record, its result or its tool's arguments, which would keep a closed
session (and a caller's data) alive.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

Value = TypeVar("Value")


class Memory(Generic[Value]):
    def __init__(self, per_scope: int, total: int, max_age: float, clock: Callable[[], float] | None = None) -> None:
        self.per_scope, self.total, self.max_age = per_scope, total, max_age
        self._clock = clock  # None: time.monotonic, looked up as it is asked
        self._lock = threading.Lock()
        # Every entry, oldest first: (scope id, key) -> (value, when written).
        self._entries: OrderedDict[tuple[int, Hashable], tuple[Value, float]] = OrderedDict()
        # Each scope's keys, oldest first, and the weak reference whose callback forgets it (None for a scope that
        # cannot have one).
        self._scopes: dict[int, tuple[OrderedDict[Hashable, None], weakref.ref[Any] | None]] = {}
        # Scopes collected since the last call, forgotten by the next one before anything else: a callback runs
        # wherever the collector does (under this lock, perhaps), and a new scope may take a collected one's id.
        self._collected: list[int] = []
        # Whether anything is held: read without the lock (an attribute, not a call: asked on every request), so that
        # a caller with nothing to match need not look.
        self.held = False

    def _now(self) -> float:
        return time.monotonic() if self._clock is None else self._clock()

    def put(self, scope: object, key: Hashable, value: Value) -> None:
        # Once per answered call, or more: the common case (nothing due, a scope already held) calls nothing more.
        scope_id = 0 if scope is None else id(scope)
        now = time.monotonic() if self._clock is None else self._clock()
        entries, entry = self._entries, (scope_id, key)
        with self._lock:
            if self._collected or (entries and next(iter(entries.values()))[1] < now - self.max_age):
                self._settle(now)
            held = self._scopes.get(scope_id)
            keys = held[0] if held is not None else self._keys_of(scope, scope_id)
            if key in keys:  # written again: it moves to the end
                del entries[entry], keys[key]
            entries[entry] = (value, now)
            keys[key] = None
            self.held = True
            if len(keys) > self.per_scope:
                self._drop((scope_id, next(iter(keys))))
            while len(entries) > self.total:
                self._drop(next(iter(entries)))

    def take(self, scope: object, key: Hashable) -> Value | None:
        """The value under `key` in `scope`, within its age, which is forgotten."""
        return self._find(scope, key, take=True)

    def peek(self, scope: object, key: Hashable) -> Value | None:
        """The value under `key` in `scope`, within its age, which stays."""
        return self._find(scope, key, take=False)

    def forget(self, scope: object) -> None:
        """`scope` ended: nothing of it is asked for again."""
        with self._lock:
            self._settle(self._now())
            self._forget(_id(scope))

    def clear(self) -> None:
        with self._lock:
            for scope_id in list(self._scopes):
                self._forget(scope_id)

    def __len__(self) -> int:
        with self._lock:
            self._settle(self._now())
            return len(self._entries)

    def scopes(self) -> int:
        """How many scopes hold anything (what a test asserts drops to zero)."""
        with self._lock:
            self._settle(self._now())
            return len(self._scopes)

    def _find(self, scope: object, key: Hashable, *, take: bool) -> Value | None:
        if not self._entries:
            return None
        entry = (_id(scope), key)
        with self._lock:
            self._settle(self._now())
            found = self._entries.get(entry)
            if found is not None and take:
                self._drop(entry)
        return found[0] if found is not None else None

    def _keys_of(self, scope: object, scope_id: int) -> OrderedDict[Hashable, None]:
        held = self._scopes.get(scope_id)
        if held is None:
            watch: weakref.ref[Any] | None = None
            try:  # the callback holds neither the scope nor this memory
                watch = weakref.ref(scope, functools.partial(_forget_scope, weakref.ref(self), scope_id))
            except TypeError:  # None, or a scope that cannot be weakly referenced: `forget` and the age bound it
                pass
            held = self._scopes[scope_id] = (OrderedDict(), watch)
        return held[0]

    def _settle(self, now: float) -> None:
        """Forget the scopes collected since, then what is older than `max_age`."""
        while self._collected:
            self._forget(self._collected.pop())
        horizon = now - self.max_age
        entries = self._entries
        while entries:
            entry, (_, written) = next(iter(entries.items()))
            if written >= horizon:
                return
            self._drop(entry)

    def _drop(self, entry: tuple[int, Hashable]) -> None:
        entries = self._entries
        del entries[entry]
        self.held = bool(entries)
        scope_id, key = entry
        keys = self._scopes[scope_id][0]
        del keys[key]
        if not keys:
            del self._scopes[scope_id]  # and its weak reference: its callback will not run

    def _forget(self, scope_id: int) -> None:
        held = self._scopes.get(scope_id)
        if held is not None:
            for key in list(held[0]):
                self._drop((scope_id, key))


def _id(scope: object) -> int:
    return 0 if scope is None else id(scope)


def _forget_scope(memory: weakref.ref[Memory[Any]], scope_id: int, _collected: object) -> None:
    found = memory()
    if found is not None:
        found._collected.append(scope_id)  # atomic: no lock, which the collector may be running under
