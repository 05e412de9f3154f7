"""A pytest plugin loaded into a project's own test suite (`pytest -p otel_session`): the MCP SDK's, FastMCP's.

OTEL_MCP_SUITE_MODE says what the whole session runs under:
- `off`: nothing (the baseline);
- `tracing`: a plain global SDK TracerProvider and no plugin, to tell "fails because tracing is on" apart;
- `plugin`: otel-mcp-cancel instrumenting the whole session, with SDK providers and in-memory exporters
  passed to `instrument()` (the global provider stays the suite's own);
- `plugin-global`: otel-mcp-cancel instrumenting the whole session with the global tracer provider, whichever
  the suite sets (FastMCP's telemetry tests set theirs and read our spans beside FastMCP's from it), and an
  SDK meter provider of its own (so the plugin is active from the first test).
Every fault line the plugin logs (a WARNING on logger `otel_mcp_cancel` with the log attribute
`otel_mcp_cancel.fault`) is appended to OTEL_MCP_SUITE_FAULTS,
and each test's outcome to OTEL_MCP_SUITE_RESULTS.
"""

from __future__ import annotations

import json
import logging
import os

MODE = os.environ.get("OTEL_MCP_SUITE_MODE", "off")


def pytest_configure(config: object) -> None:
    if MODE == "off":
        return
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    if MODE == "tracing":
        trace.set_tracer_provider(tracer_provider)
        return

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from otel_mcp_cancel import McpCancelInstrumentor

    providers = {"meter_provider": MeterProvider(metric_readers=[InMemoryMetricReader()])}
    if MODE == "plugin":
        providers["tracer_provider"] = tracer_provider

    faults = logging.FileHandler(os.environ["OTEL_MCP_SUITE_FAULTS"], encoding="utf-8")
    faults.setLevel(logging.WARNING)
    faults.addFilter(lambda record: "otel_mcp_cancel.fault" in record.__dict__)
    faults.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger("otel_mcp_cancel").addHandler(faults)
    McpCancelInstrumentor().instrument(**providers)


def pytest_runtest_logreport(report: object) -> None:
    """Each phase's outcome, by test, to OTEL_MCP_SUITE_RESULTS (written where results gather: not in a worker)."""
    outcome = "failed" if report.failed else "skipped" if report.skipped else "passed"
    if report.when != "call" and outcome == "passed":
        return  # setup and teardown passing say nothing about the test
    _record(report.nodeid, outcome)


def pytest_collectreport(report: object) -> None:
    """A test file that cannot be collected is recorded as failed under its own path."""
    if report.failed and report.nodeid.endswith(".py"):
        _record(report.nodeid, "failed")


def _record(nodeid: str, outcome: str) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") or not os.environ.get("OTEL_MCP_SUITE_RESULTS"):
        return
    with open(os.environ["OTEL_MCP_SUITE_RESULTS"], "a", encoding="utf-8") as results:
        results.write(json.dumps([nodeid, outcome]) + "\n")
