"""Containment for telemetry code: a fault never reaches the host, and stays visible in the log.

`with contained("..."):` where a block runs now and then; on the per-request path, a plain
`try: ... except Exception: fault("...")`, which costs nothing until something fails.

The first fault of each kind is a WARNING with its traceback; a kind that keeps failing is logged again at most
once every REPEAT_SECONDS, with how many times it failed since, so that a persisting fault (untraced traffic)
never goes quiet. Each fault line carries the log attribute `otel_mcp_cancel.fault` (the activity), which tells
it from the plugin's other WARNINGs (a ghost's). `reset()` (by uninstrument()) forgets what was logged.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from types import TracebackType

logger = logging.getLogger("otel_mcp_cancel")

REPEAT_SECONDS = 60.0
FAULT_ATTRIBUTE = "otel_mcp_cancel.fault"  # a fault line's log attribute: the activity that failed
LOST_ATTRIBUTE = "otel_mcp_cancel.lost_capability"  # a lost capability's WARNING's log attribute

_lock = threading.Lock()
_logged: dict[str, list[float | int]] = {}  # activity -> [when last logged, faults since]
_lost: set[str] = set()


class contained:  # noqa: N801 - used like contextlib's helpers: `with contained("..."):`
    """Swallow an `Exception` raised while doing `activity`, and log it as a fault.

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
    """Log the exception being handled as a fault of `activity`: the first with its traceback, then at most once
    every REPEAT_SECONDS with the count since. Call it from an `except` block."""
    now = time.monotonic()
    with _lock:
        logged = _logged.get(activity)
        if logged is None:
            _logged[activity] = [now, 0]
            repeats = 0
        else:
            logged[1] += 1
            if now - logged[0] < REPEAT_SECONDS:
                return
            repeats, logged[0], logged[1] = int(logged[1]), now, 0
    if repeats == 0:
        logger.warning("otel_mcp_cancel: %s failed; the MCP request itself is unaffected", activity,
                       exc_info=sys.exc_info(), extra={FAULT_ATTRIBUTE: activity})
    else:
        logger.warning("otel_mcp_cancel: %s failed %d more times since it was last logged; the MCP requests "
                       "themselves are unaffected", activity, repeats, extra={FAULT_ATTRIBUTE: activity})


def lost(capability: str, why: str, where: str = "on this release") -> None:
    """The installed library no longer offers what the plugin observes `capability` by (`why`: a target missing,
    or of another shape), or (`where`: in this process) another library hides it: one WARNING a capability; the
    rest keeps working."""
    with _lock:
        first = capability not in _lost
        _lost.add(capability)
    if first:
        logger.warning("otel_mcp_cancel: %s: not observed %s (%s); everything else is, as before",
                       capability, where, why, extra={LOST_ATTRIBUTE: capability})


def reset() -> None:
    """Forget every fault and lost capability logged: uninstrument() ran, and the next instrument() starts afresh."""
    with _lock:
        _logged.clear()
        _lost.clear()
