"""Process-wide ghost totals, so a server can report them from its own health tool."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timezone


@dataclass(frozen=True)
class GhostStats:
    total: int
    last_seen: datetime | None  # UTC
    last_tool: str | None


class GhostLedger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = GhostStats(total=0, last_seen=None, last_tool=None)

    def record(self, tool: str | None) -> None:
        with self._lock:
            self._stats = GhostStats(self._stats.total + 1, datetime.now(timezone.utc), tool)

    def snapshot(self) -> GhostStats:
        with self._lock:
            return self._stats


LEDGER = GhostLedger()


def ghost_stats() -> GhostStats:
    """Ghost responses seen by this process since it started: total, last_seen (UTC), last_tool."""
    return LEDGER.snapshot()
