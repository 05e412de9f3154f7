"""Whether anything records what the plugin makes. While the tracer and the meter are both no-ops
(`OTEL_SDK_DISABLED=true`, no-op providers, or no provider given and no global one set yet), requests
pass through untouched: the host pays the SDK's own cost and nothing more. Nor is anything made where the
code around it suppressed instrumentation."""

from __future__ import annotations

from typing import Any

from opentelemetry.metrics import NoOpMeter
from opentelemetry.trace import NoOpTracer


class Recording:
    """Asked as each request arrives; once something records, it always will (providers are never unset):
    `known` says so without a call."""

    __slots__ = ("_tracer", "_meter", "known")

    def __init__(self, tracer: Any, meter: Any) -> None:
        self._tracer, self._meter = tracer, meter
        self.known = False  # something records

    def __call__(self) -> bool:
        if not self.known:
            self.known = not (_no_op_tracer(self._tracer) and _no_op_meter(self._meter))
        return self.known


def _no_op_tracer(tracer: Any) -> bool:
    # A proxy tracer resolves to the global provider's once one is set. Anything unrecognised records.
    return isinstance(getattr(tracer, "_tracer", tracer), NoOpTracer)


def _no_op_meter(meter: Any) -> bool:
    # A proxy meter holds the global provider's once one is set (None before).
    resolved = getattr(meter, "_real_meter", meter)
    return resolved is None or isinstance(resolved, NoOpMeter)
