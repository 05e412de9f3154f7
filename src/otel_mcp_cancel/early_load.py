"""Under `opentelemetry-instrument`, the plugin is instrumented before any instrumentor is loaded (an
`opentelemetry_pre_instrument` entry point): the loader stops at the first instrumentor whose `instrument()`
raises (Traceloop's on mcp 2.x does), and an MCP process would otherwise lose ours with it, silently. It honours
what the loader honours: OTEL_PYTHON_DISABLED_INSTRUMENTATIONS (our entry point's name, or `*`) and the declared
dependencies; the loader's own call for our entry point then finds it done (`McpCancelInstrumentor.instrument`)."""

from __future__ import annotations

import logging
import os

from opentelemetry.instrumentation.environment_variables import OTEL_PYTHON_DISABLED_INSTRUMENTATIONS

ENTRY_POINT = "mcp_cancel"  # our instrumentor's entry point: the name OTEL_PYTHON_DISABLED_INSTRUMENTATIONS takes

logger = logging.getLogger("otel_mcp_cancel")


def disabled() -> bool:
    """Whether the user turned ours off for `opentelemetry-instrument`, as its loader reads the variable."""
    names = {name.strip() for name in os.environ.get(OTEL_PYTHON_DISABLED_INSTRUMENTATIONS, "").split(",")}
    return ENTRY_POINT in names or "*" in names


def load() -> None:
    """Instrument now, unless disabled or mcp is not installed in a supported release (the loader says why)."""
    if disabled():
        return
    try:
        from opentelemetry.instrumentation.dependencies import get_dependency_conflicts

        from otel_mcp_cancel import McpCancelInstrumentor
        from otel_mcp_cancel.package import _instruments

        if get_dependency_conflicts(list(_instruments)) is None:
            McpCancelInstrumentor().instrument(loaded_early=True)
    except Exception:  # never into the loader: it would stop loading the others
        logger.exception("otel_mcp_cancel: instrumenting ahead of the other instrumentors failed")
