"""Containment for telemetry code: a fault is logged once per kind and never reaches the host."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

logger = logging.getLogger("otel_mcp_cancel")

_reported: set[str] = set()
_lock = threading.Lock()


@contextmanager
def contained(activity: str) -> Iterator[None]:
    """Swallow an `Exception` raised while doing `activity`; log the first one of each activity."""
    try:
        yield
    except Exception:
        with _lock:
            first = activity not in _reported
            _reported.add(activity)
        if first:
            logger.exception("otel_mcp_cancel: %s failed; the MCP request itself is unaffected", activity)
