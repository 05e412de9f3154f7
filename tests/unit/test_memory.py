"""The one bounded memory: caps per scope and in all, an age enforced on write and read, take-once and peek, and
scopes that no value keeps alive."""

from __future__ import annotations

import gc
import weakref

from otel_mcp_cancel.memory import Memory


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Scope:
    """A session, as far as the memory is concerned: any object."""


def test_take_returns_a_value_once_and_peek_leaves_it() -> None:
    memory: Memory[str] = Memory(per_scope=4, total=16, max_age=10)
    scope = Scope()
    memory.put(scope, "1", "a")
    assert memory.peek(scope, "1") == "a"
    assert memory.take(scope, "1") == "a"
    assert memory.take(scope, "1") is None
    assert len(memory) == 0 and memory.scopes() == 0


def test_scopes_are_apart() -> None:
    memory: Memory[str] = Memory(per_scope=4, total=16, max_age=10)
    one, other = Scope(), Scope()
    memory.put(one, "1", "a")
    assert memory.take(other, "1") is None
    assert memory.take(None, "1") is None
    memory.put(None, "1", "process")
    assert memory.take(one, "1") == "a" and memory.take(None, "1") == "process"


def test_each_scope_keeps_its_newest_per_scope_values() -> None:
    memory: Memory[int] = Memory(per_scope=3, total=100, max_age=10)
    one, other = Scope(), Scope()
    for n in range(5):
        memory.put(one, n, n)
    memory.put(other, 0, 100)
    assert [memory.peek(one, n) for n in range(5)] == [None, None, 2, 3, 4]
    assert memory.peek(other, 0) == 100 and len(memory) == 4


def test_all_scopes_together_keep_the_newest_total() -> None:
    memory: Memory[int] = Memory(per_scope=10, total=4, max_age=10)
    scopes = [Scope() for _ in range(6)]
    for n, scope in enumerate(scopes):
        memory.put(scope, "k", n)
    assert [memory.peek(scope, "k") for scope in scopes] == [None, None, 2, 3, 4, 5]
    assert memory.scopes() == 4


def test_writing_again_renews_a_value() -> None:
    clock = Clock()
    memory: Memory[str] = Memory(per_scope=2, total=10, max_age=10, clock=clock)
    scope = Scope()
    memory.put(scope, "a", "first")
    memory.put(scope, "b", "b")
    clock.now = 5
    memory.put(scope, "a", "second")  # now the newest: "b" goes first
    memory.put(scope, "c", "c")
    assert memory.peek(scope, "a") == "second" and memory.peek(scope, "b") is None


def test_age_is_enforced_when_writing_not_only_when_reading() -> None:
    clock = Clock()
    memory: Memory[str] = Memory(per_scope=10, total=10, max_age=10, clock=clock)
    old = Scope()
    memory.put(old, "1", "old")
    clock.now = 10.5
    new = Scope()
    memory.put(new, "2", "new")  # the write alone drops what aged out, and its scope with it
    assert memory.scopes() == 1 and memory.peek(old, "1") is None and memory.peek(new, "2") == "new"


def test_a_value_just_within_its_age_is_found() -> None:
    clock = Clock()
    memory: Memory[str] = Memory(per_scope=10, total=10, max_age=10, clock=clock)
    scope = Scope()
    memory.put(scope, "1", "v")
    clock.now = 10.0
    assert memory.peek(scope, "1") == "v"
    clock.now = 10.01
    assert memory.peek(scope, "1") is None


def test_no_value_keeps_its_scope_alive_and_a_collected_scope_is_forgotten() -> None:
    memory: Memory[object] = Memory(per_scope=10, total=100, max_age=60)
    scope = Scope()
    ref = weakref.ref(scope)
    memory.put(scope, "1", object())
    del scope
    gc.collect()
    assert ref() is None
    assert memory.scopes() == 0 and len(memory) == 0


def test_a_new_scope_on_a_collected_scopes_id_finds_nothing_of_it() -> None:
    memory: Memory[str] = Memory(per_scope=10, total=100, max_age=60)
    for _ in range(200):  # CPython reuses a freed object's address at once: the same id comes back
        scope = Scope()
        assert memory.peek(scope, "1") is None
        memory.put(scope, "1", "of an earlier scope")
        del scope
    assert memory.scopes() <= 1


def test_a_scope_that_cannot_be_weakly_referenced_is_forgotten_by_forget() -> None:
    memory: Memory[str] = Memory(per_scope=10, total=100, max_age=60)
    scope = ("a", "tuple")  # tuples take no weak references
    memory.put(scope, "1", "v")
    assert memory.peek(scope, "1") == "v"
    memory.forget(scope)
    assert memory.scopes() == 0


def test_clear_forgets_everything_and_held_says_so() -> None:
    memory: Memory[str] = Memory(per_scope=10, total=100, max_age=60)
    assert not memory.held
    scopes = [Scope(), Scope()]
    for scope in scopes:
        memory.put(scope, "1", "v")
    assert memory.held
    memory.clear()
    assert not memory.held and memory.scopes() == 0
