"""The one place anything the plugin does later is scheduled: the export before a host kills a stdio server, a task
whose result expires, an answer the stdio wire stops waiting for. One daemon thread runs what is due, started when
something is first scheduled (never before a server serves) and gone once nothing is left; it never keeps the
process alive. A callback runs contained: a failure is a logged fault, and the next one still runs."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

from otel_mcp_cancel.faults import contained

THREAD_NAME = "otel_mcp_cancel scheduler"


class Scheduled:
    __slots__ = ("when", "order", "callback", "activity")

    def __init__(self, when: float, order: int, callback: Callable[[], None], activity: str) -> None:
        self.when, self.order, self.callback, self.activity = when, order, callback, activity

    def __lt__(self, other: Scheduled) -> bool:
        return (self.when, self.order) < (other.when, other.order)


class Scheduler:
    def __init__(self) -> None:
        self._due = threading.Condition()
        self._heap: list[Scheduled] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def call_later(self, seconds: float, callback: Callable[[], None], activity: str) -> Scheduled:
        """Run `callback` in `seconds` (`activity` names it in a fault's line)."""
        return self.call_at(time.monotonic() + seconds, callback, activity)

    def call_at(self, when: float, callback: Callable[[], None], activity: str) -> Scheduled:
        """Run `callback` once `time.monotonic()` reaches `when`."""
        entry = Scheduled(when, next(self._order), callback, activity)
        with self._due:
            heapq.heappush(self._heap, entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
                self._thread.start()
            self._due.notify()
        return entry

    def cancel(self, entry: Scheduled) -> None:
        with self._due:
            if entry in self._heap:
                self._heap.remove(entry)
                heapq.heapify(self._heap)
                self._due.notify()  # it may have been the next due, or the last

    def pending(self) -> list[str]:
        """What is scheduled and not yet run, by activity, soonest first."""
        with self._due:
            return [entry.activity for entry in sorted(self._heap)]

    def _run(self) -> None:
        while True:
            with self._due:
                while self._heap and self._heap[0].when > time.monotonic():
                    self._due.wait(self._heap[0].when - time.monotonic())
                if not self._heap:
                    self._thread = None  # the next call starts another
                    return
                entry = heapq.heappop(self._heap)
            with contained(entry.activity):
                entry.callback()


SCHEDULER = Scheduler()
