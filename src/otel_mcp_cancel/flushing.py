"""What the providers hold, exported now and for a bounded time: for a process about to be killed.

Each provider is flushed in a thread of its own, all at once, and the caller waits for them until a deadline,
never longer: the SDK's batch processors ignore force_flush's timeout (open-telemetry/opentelemetry-python#4568)
and an exporter whose endpoint is down retries for its own timeout (10 s by default), so a flush is abandoned,
not awaited, once the deadline passes."""

from __future__ import annotations

import threading
import time
from typing import Any

from otel_mcp_cancel.faults import contained


class Flusher:
    """The providers given to instrument(), or the global ones (and the global logger provider, which carries
    the ghost's WARNING)."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider

    def flush(self, seconds: float) -> None:
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
        for thread in flushes:
            thread.join(max(0.0, deadline - time.monotonic()))


def _flush(flush: Any, seconds: float) -> None:
    with contained("flushing telemetry"):
        flush(timeout_millis=seconds * 1000)
