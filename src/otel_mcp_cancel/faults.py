"""Containment for telemetry code: a fault is logged once per kind and never reaches the host.

`with contained("..."):` where a block runs now and then; on the per-request path, a plain
`try: ... except Exception: fault("...")`, which costs nothing until something fails.
"""

from __future__ import annotations

import logging
import sys
import threading
from types import TracebackType

logger = logging.getLogger("otel_mcp_cancel")

_reported: set[str] = set()
_lock = threading.Lock()


class contained:  # noqa: N801 - used like contextlib's helpers: `with contained("..."):`
    """Swallow an `Exception` raised while doing `activity`; log the first one of each activity.

    A class, not a generator-based context manager: it runs several times on every request.
    """

    __slots__ = ("activity",)

    def __init__(self, activity: str) -> None:
        self.activity = activity

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        if kind is None or not issubclass(kind, Exception):
            return False
        fault(self.activity)
        return True


def fault(activity: str) -> None:
    """Log the exception being handled, the first time `activity` fails. Call it from an `except` block."""
    with _lock:
        first = activity not in _reported
        _reported.add(activity)
    if first:
        logger.error(
            "otel_mcp_cancel: %s failed; the MCP request itself is unaffected", activity, exc_info=sys.exc_info()
        )


_lost: set[str] = set()


def lost(capability: str, consequence: str) -> None:
    """The installed library no longer offers what the plugin observes `capability` by (a target missing, or of
    another shape): one WARNING a capability, naming what is then reported otherwise; the rest keeps working."""
    with _lock:
        first = capability not in _lost
        _lost.add(capability)
    if first:
        logger.warning("otel_mcp_cancel: %s cannot be observed on this release; %s", capability, consequence)
