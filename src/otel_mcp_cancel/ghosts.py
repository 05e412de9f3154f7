"""Process-wide ghost totals, so a server can report them from its own health tool."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType

from otel_mcp_cancel.conventions import GHOST_RISKS


@dataclass(frozen=True)
class GhostStats:
    total: int
    last_seen: datetime | None  # UTC
    last_tool: str | None
    by_risk: Mapping[str, int] = field(default_factory=lambda: MappingProxyType(dict.fromkeys(GHOST_RISKS, 0)))


class GhostLedger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = GhostStats(total=0, last_seen=None, last_tool=None)

    def record(self, tool: str | None, risk: str) -> None:
        with self._lock:
            by_risk = {**self._stats.by_risk, risk: self._stats.by_risk.get(risk, 0) + 1}
            self._stats = GhostStats(
                self._stats.total + 1, datetime.now(timezone.utc), tool, MappingProxyType(by_risk)
            )

    def snapshot(self) -> GhostStats:
        with self._lock:
            return self._stats

    def reset(self) -> None:
        with self._lock:
            self._stats = GhostStats(total=0, last_seen=None, last_tool=None)


LEDGER = GhostLedger()


def ghost_stats() -> GhostStats:
    """Ghost responses seen while instrumented (since instrument(), or the last uninstrument()): total, last_seen
    (UTC), last_tool, by_risk."""
    return LEDGER.snapshot()
