"""Telemetry delivered at the library's own boundaries, for a process about to be killed.

A process killed by a signal it leaves at its default (SIGTERM from a supervisor, from uvicorn re-raising it
after its graceful stop, from an MCP host 2 s after it closed a stdio server's stdin) runs no exit hook, and
the OpenTelemetry SDK's unexported spans and points die with it. The plugin installs no signal handler; it
exports where the MCP library itself says serving ended:

- `at_boundary`: a streamable HTTP app's session manager stopped (the lifespan's end, which uvicorn runs in
  each worker before re-raising the signal): exported now, waited for at most FLUSH_SECONDS.
- `before_kill`: a stdio server's caller hung up while calls were still running (the host stops such a
  server 2 s later): exported GRACE_SECONDS later, in the background, unless the process has begun its own
  exit by then, where the SDK's shutdown exports as always (a second export would only make that exit wait
  for the first when the collector is down).

Each provider is flushed in a thread of its own, all at once: the SDK's batch processors ignore force_flush's
timeout (open-telemetry/opentelemetry-python#4568) and an exporter whose endpoint is down retries for its own
timeout (10 s by default), so a flush is abandoned, not awaited, once its deadline passes."""

from __future__ import annotations

import threading
import time
from typing import Any

from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.scheduler import SCHEDULER, Scheduled

FLUSH_SECONDS = 0.5  # what a boundary may add to a process's stop: well under the 1 s the plugin promises
GRACE_SECONDS = 0.5  # a stdio server still running this long after its caller left is waiting to be killed


class Flusher:
    """The providers given to instrument(), or the global ones (and the global logger provider, which carries
    the ghost's WARNING)."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider

    def flush(self, seconds: float, *, wait: bool = True) -> None:
        from opentelemetry import metrics, trace
        from opentelemetry._logs import get_logger_provider

        deadline = time.monotonic() + seconds
        flushes = []
        for provider in (self._tracer_provider or trace.get_tracer_provider(),
                         self._meter_provider or metrics.get_meter_provider(), get_logger_provider()):
            flush = getattr(provider, "force_flush", None)  # the API's no-op and proxy providers have none
            if flush is not None:
                thread = threading.Thread(target=_flush, args=(flush, seconds), name="otel_mcp_cancel flush",
                                          daemon=True)
                thread.start()
                flushes.append(thread)
        for thread in flushes if wait else ():
            thread.join(max(0.0, deadline - time.monotonic()))


def _flush(flush: Any, seconds: float) -> None:
    with contained("flushing telemetry"):
        flush(timeout_millis=seconds * 1000)


class Delivery:
    def __init__(self, flusher: Flusher) -> None:
        self._flusher = flusher
        self._lock = threading.Lock()
        self._exiting = False
        self._pending: Scheduled | None = None

    def at_boundary(self) -> None:
        """Serving ended and the process may be killed next: export now, for at most FLUSH_SECONDS."""
        with contained("exporting as serving ended"):
            self._flusher.flush(FLUSH_SECONDS)

    def before_kill(self) -> None:
        """What was just concluded is to be exported before the host kills the process, unless it exits first."""
        with self._lock, contained("exporting before the host stops the process"):
            if self._exiting or self._pending is not None:
                return
            self._pending = SCHEDULER.call_later(GRACE_SECONDS, self._deliver,
                                                 "exporting before the host stops the process")

    def exiting(self) -> None:
        """The process began its own exit (the plugin's exit hook, before the SDK's shutdown exports)."""
        with self._lock:
            self._exiting = True
            if self._pending is not None:
                SCHEDULER.cancel(self._pending)
                self._pending = None

    def _deliver(self) -> None:
        with self._lock:
            if self._exiting:
                return
            self._pending = None
        with contained("exporting before the host stops the process"):
            self._flusher.flush(FLUSH_SECONDS, wait=False)
