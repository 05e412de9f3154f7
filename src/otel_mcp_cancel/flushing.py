"""Telemetry exported now, for a server about to be stopped: one served over stdio whose caller hung up.
The SDK's stdio client terminates its server 2 s after closing its stdin, and a terminated process exports
nothing more (the batch processors wait up to 5 s, the metric reader a minute). The flush runs in a thread of
its own, so that the event loop does not wait on an exporter, and is bounded to end before that."""

from __future__ import annotations

import threading
from typing import Any

from otel_mcp_cancel.faults import contained

FLUSH_TIMEOUT_MILLIS = 1_500


class Flusher:
    """The providers given to instrument(), or the global ones (and the global logger provider, which carries
    the ghost's WARNING)."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._flushes: list[threading.Thread] = []

    def flush_soon(self) -> None:
        with contained("flushing telemetry"):
            flush = threading.Thread(target=self._flush, name="otel_mcp_cancel flush", daemon=True)
            self._flushes = [thread for thread in self._flushes if thread.is_alive()] + [flush]
            flush.start()

    def finish(self) -> None:
        """As the process exits: let the flushes in flight end (each is bounded) before the SDK shuts its
        providers down. A daemon thread stopped mid-export would lose what it collected: under delta
        temporality, points no later export sends again."""
        for flush in self._flushes:
            flush.join(3 * FLUSH_TIMEOUT_MILLIS / 1000)  # its three providers, one after the other

    def _flush(self) -> None:
        from opentelemetry import metrics, trace
        from opentelemetry._logs import get_logger_provider

        providers = (self._tracer_provider or trace.get_tracer_provider(),
                     self._meter_provider or metrics.get_meter_provider(), get_logger_provider())
        for provider in providers:
            flush = getattr(provider, "force_flush", None)  # the API's no-op and proxy providers have none
            if flush is not None:
                with contained("flushing telemetry"):
                    flush(timeout_millis=FLUSH_TIMEOUT_MILLIS)
