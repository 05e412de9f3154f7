"""OpenTelemetry instrumentation for the MCP Python SDK that tells ok, failed and cancelled
tool calls apart and makes ghost responses visible.

Usage::

    from otel_mcp_cancel import McpCancelInstrumentor

    McpCancelInstrumentor().instrument()

or, with no code change, `opentelemetry-instrument python server.py` (entry point `mcp_cancel`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.metrics import get_meter
from opentelemetry.semconv.schemas import Schemas
from opentelemetry.trace import get_tracer

from otel_mcp_cancel.environment_variables import OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS
from otel_mcp_cancel.ghosts import GhostStats, ghost_stats
from otel_mcp_cancel.package import _instruments
from otel_mcp_cancel.version import __version__

logger = logging.getLogger("otel_mcp_cancel")

__all__ = ["GhostStats", "McpCancelInstrumentor", "__version__", "ghost_stats"]


class McpCancelInstrumentor(BaseInstrumentor):
    """Instruments the mcp server with spans and metrics that carry each request's true outcome."""

    _server_hooks: Any = None
    _applied: list[Any] = []

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        try:
            from otel_mcp_cancel import hooks
            from otel_mcp_cancel.instruments import create_instruments
            from otel_mcp_cancel.server_telemetry import ServerTelemetry
            from otel_mcp_cancel.server_v2 import ServerHooksV2
        except ImportError as exc:
            logger.warning("otel_mcp_cancel: mcp 2.x is not importable (%s); nothing is instrumented", exc)
            return
        schema_url = Schemas.V1_28_0.value
        tracer = get_tracer(__name__, __version__, kwargs.get("tracer_provider"), schema_url=schema_url)
        meter = get_meter(__name__, __version__, kwargs.get("meter_provider"), schema_url=schema_url)
        telemetry = ServerTelemetry(tracer, create_instruments(meter), cancelled_is_error=_cancelled_is_error())
        self._server_hooks = ServerHooksV2(telemetry)
        self._applied = hooks.apply(self._server_hooks.hooks())

    def _uninstrument(self, **kwargs: Any) -> None:
        from otel_mcp_cancel import hooks

        if self._server_hooks is not None:
            self._server_hooks.active = False
        hooks.remove(self._applied)
        self._server_hooks, self._applied = None, []


def _cancelled_is_error() -> bool:
    value = os.environ.get(OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS, "unset").strip().lower()
    if value not in ("unset", "error"):
        logger.warning("otel_mcp_cancel: %s=%r is not 'unset' or 'error'; using 'unset'",
                       OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS, value)
    return value == "error"
