"""Faults in telemetry never reach a call: an exporter, span processor, metric reader or meter that
raises, user hooks that raise, an internal error in classification, `uninstrument()` mid-traffic.

Each test runs the same traffic through the SDK's own client and server, both instrumented, and
compares what the caller got with what the same traffic gets with no instrumentation at all. The
plugin logs one error line per fault kind (however many calls hit it), and nothing hangs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    InMemoryMetricReader,
    MetricExporter,
    MetricExportResult,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind

from otel_mcp_cancel import McpCancelInstrumentor, faults
from otel_mcp_cancel.hooks import client_transports
from otel_mcp_cancel.request_state import LIVE
from tests.conftest import SPANS, TRACER_PROVIDER, Captured, instrumentation, is_request_span
from tests.raw_peer import is_result, raw_session, served_in_memory
from tests.sdk_client import is_tool_error, sdk_client
from tests.servers import Gates, notes_server

pytestmark = pytest.mark.anyio

CALLS = 4  # of each tool: a fault that is logged once must be hit more than once


async def traffic() -> list[tuple[bool, str]]:
    """Ok and failed calls through the SDK's client and server: what each caller got (isError, text)."""
    async with sdk_client(served_in_memory(notes_server(Gates()))) as client:
        with anyio.fail_after(10):  # nothing hangs
            results = [await client.call_tool("echo", {"text": f"call {n}"}) for n in range(CALLS)]
            results += [await client.call_tool("broken", {"text": "x"}) for _ in range(CALLS)]
    return [(is_tool_error(result), result.content[0].text) for result in results]


@pytest.fixture
async def uninstrumented_answers() -> list[tuple[bool, str]]:
    return await traffic()


def fault_lines(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    return [r for r in records if r.name == "otel_mcp_cancel" and faults.FAULT_ATTRIBUTE in r.__dict__]


@pytest.fixture
def plugin_errors(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """The fault lines this plugin logged, sorted (each kind is logged once a minute at most: start afresh)."""
    faults.reset()
    caplog.set_level(logging.WARNING)
    return lambda: sorted(r.getMessage() for r in fault_lines(caplog.records))


def failed(*activities: str) -> list[str]:
    line = "otel_mcp_cancel: {} failed; the MCP request itself is unaffected"
    return sorted(line.format(activity) for activity in activities)


@contextmanager
def instrumented_with(**instrument_kwargs: Any) -> Iterator[None]:
    with instrumentation(**{"meter_provider": MeterProvider(), **instrument_kwargs}):
        yield
    assert len(LIVE) == 0 and client_transports.open_count() == 0


def tool_call_durations(reader: InMemoryMetricReader, metric: str) -> dict[tuple[str, str], int]:
    return {
        (point.attributes["gen_ai.tool.name"], point.attributes["tool.outcome"]): point.count
        for point in Captured(SPANS, reader).points(metric)
        if point.attributes.get("mcp.method.name") == "tools/call"
    }


EVERY_CALL_MEASURED = {("echo", "ok"): CALLS, ("broken", "failed"): CALLS}


def outcomes_on_spans(spans: Sequence[Any], kind: SpanKind) -> list[str | None]:
    return sorted(
        str(s.attributes.get("tool.outcome"))
        for s in spans
        if s.kind is kind and s.attributes.get("mcp.method.name") == "tools/call"
    )


EVERY_CALL_TRACED = sorted(["ok"] * CALLS + ["failed"] * CALLS)


class RaisingSpanExporter(SpanExporter):
    def export(self, spans: Any) -> Any:
        raise RuntimeError("collector is down")

    def shutdown(self) -> None:
        pass


class RaisingSpanProcessor(SpanProcessor):
    def __init__(self, where: str) -> None:
        self.where = where

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if self.where == "on_start":
            raise RuntimeError("span processor is broken")

    def on_end(self, span: Any) -> None:
        if self.where == "on_end":
            raise RuntimeError("span processor is broken")


class RaisingMetricExporter(MetricExporter):
    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        raise RuntimeError("metrics backend is down")

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


class RaisingInstrument:
    def record(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("metric backend is broken")

    add = record


class RaisingMeter:
    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: RaisingInstrument()


class RaisingMeterProvider(NoOpMeterProvider):
    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        return RaisingMeter()


async def test_an_exporter_that_raises(uninstrumented_answers, plugin_errors, caplog) -> None:
    """The SDK's span processor contains its exporter's fault and logs it; the plugin has nothing to add."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(RaisingSpanExporter()))
    reader = InMemoryMetricReader()
    with instrumented_with(tracer_provider=provider, meter_provider=MeterProvider(metric_readers=[reader])):
        assert await traffic() == uninstrumented_answers
    assert tool_call_durations(reader, "mcp.server.operation.duration") == EVERY_CALL_MEASURED
    assert tool_call_durations(reader, "mcp.client.operation.duration") == EVERY_CALL_MEASURED
    assert any("Exception while exporting Span" in r.getMessage() for r in caplog.records)
    assert plugin_errors() == []


@pytest.mark.parametrize(
    ("where", "activities"),
    [
        ("on_start", ["opening a client span", "opening a server span"]),
        ("on_end", ["ending a client span", "ending a server span"]),
    ],
)
async def test_a_span_processor_that_raises(uninstrumented_answers, plugin_errors, where, activities) -> None:
    """A processor's fault reaches span start and end, in the plugin's hands: contained and logged once."""
    provider = TracerProvider()
    provider.add_span_processor(RaisingSpanProcessor(where))
    reader = InMemoryMetricReader()
    with instrumented_with(tracer_provider=provider, meter_provider=MeterProvider(metric_readers=[reader])):
        assert await traffic() == uninstrumented_answers
    if where == "on_end":  # the spans existed, so every call was still measured
        assert tool_call_durations(reader, "mcp.server.operation.duration") == EVERY_CALL_MEASURED
        assert tool_call_durations(reader, "mcp.client.operation.duration") == EVERY_CALL_MEASURED
    assert plugin_errors() == failed(*activities)


async def test_a_metric_reader_that_raises(uninstrumented_answers, plugin_errors, caplog) -> None:
    """A periodic reader exporting every millisecond to an exporter that raises, while the calls run."""
    reader = PeriodicExportingMetricReader(RaisingMetricExporter(), export_interval_millis=1)
    meter_provider = MeterProvider(metric_readers=[reader])
    SPANS.clear()
    try:
        with instrumented_with(meter_provider=meter_provider):
            assert await traffic() == uninstrumented_answers
            reader.force_flush()  # one more export, now that every call was measured
    finally:
        meter_provider.shutdown()
    spans = SPANS.get_finished_spans()
    assert outcomes_on_spans(spans, SpanKind.SERVER) == outcomes_on_spans(spans, SpanKind.CLIENT) == EVERY_CALL_TRACED
    assert any("Exception while exporting metrics" in r.getMessage() for r in caplog.records)
    assert plugin_errors() == []


async def test_a_meter_that_raises(uninstrumented_answers, plugin_errors) -> None:
    SPANS.clear()
    with instrumented_with(meter_provider=RaisingMeterProvider()):
        assert await traffic() == uninstrumented_answers
    spans = SPANS.get_finished_spans()
    assert outcomes_on_spans(spans, SpanKind.SERVER) == outcomes_on_spans(spans, SpanKind.CLIENT) == EVERY_CALL_TRACED
    assert plugin_errors() == failed("measuring a client request", "measuring a server request", "measuring a session")


async def test_hooks_that_raise(uninstrumented_answers, plugin_errors) -> None:
    def broken_hook(*args: Any) -> None:
        raise RuntimeError("bug in the user's hook")

    reader = InMemoryMetricReader()
    SPANS.clear()
    with instrumented_with(
        meter_provider=MeterProvider(metric_readers=[reader]), request_hook=broken_hook, response_hook=broken_hook
    ):
        assert await traffic() == uninstrumented_answers
    spans = SPANS.get_finished_spans()
    assert outcomes_on_spans(spans, SpanKind.SERVER) == outcomes_on_spans(spans, SpanKind.CLIENT) == EVERY_CALL_TRACED
    assert tool_call_durations(reader, "mcp.server.operation.duration") == EVERY_CALL_MEASURED
    assert plugin_errors() == failed("running the request_hook", "running the response_hook")


async def test_an_internal_error_in_classification(uninstrumented_answers, plugin_errors, monkeypatch) -> None:
    def broken_classify(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("bug in the plugin")

    monkeypatch.setattr("otel_mcp_cancel.request_telemetry.classify", broken_classify)
    SPANS.clear()
    with instrumented_with():
        assert await traffic() == uninstrumented_answers
    # The spans still ended, though nothing could be said about them.
    spans = SPANS.get_finished_spans()
    assert outcomes_on_spans(spans, SpanKind.SERVER) == outcomes_on_spans(spans, SpanKind.CLIENT) == ["None"] * 8
    assert plugin_errors() == failed("classifying a client request", "classifying a server request")


async def test_uninstrument_in_the_middle_of_traffic(plugin_errors) -> None:
    """Calls in flight when instrumentation is removed finish normally; their spans end without a verdict,
    since the hooks that would have seen their answers are gone."""
    SPANS.clear()
    gates = Gates()
    instrumentor = McpCancelInstrumentor()
    instrumentor.instrument(tracer_provider=TRACER_PROVIDER)
    async with raw_session(notes_server(gates)) as peer:
        await peer.request("in-flight", "tools/call", {"name": "slow", "arguments": {"text": "before"}})
        await gates.started.wait()
        instrumentor.uninstrument()
        after = await peer.call("after", "tools/call", {"name": "echo", "arguments": {"text": "after"}})
        gates.let_go()
        with anyio.fail_after(10):
            in_flight = await peer.answer("in-flight")
    assert is_result(after) and is_result(in_flight)
    traced = {s.attributes["jsonrpc.request.id"]: s for s in SPANS.get_finished_spans()
              if s.kind.name == "SERVER" and is_request_span(s)}
    assert traced["in-flight"].end_time is not None and "tool.outcome" not in traced["in-flight"].attributes
    assert "after" not in traced or traced["after"].instrumentation_scope.name != "otel_mcp_cancel"
    assert len(LIVE) == 0
    assert plugin_errors() == []


def test_a_fault_that_persists_is_logged_again_once_a_minute_with_the_count_since(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first with its traceback, at WARNING; then one line a minute at most, counting the faults since the
    last line; uninstrument()'s reset makes the next one a first again."""
    now = [1000.0]
    monkeypatch.setattr(faults.time, "monotonic", lambda: now[0])
    faults.reset()
    caplog.set_level(logging.WARNING)

    def fails(times: int) -> None:
        for _ in range(times):
            with faults.contained("exporting a span"):
                raise RuntimeError("collector is down")

    fails(5)
    now[0] += faults.REPEAT_SECONDS - 1
    fails(3)
    now[0] += 1
    fails(1)
    fails(2)
    faults.reset()
    fails(1)
    lines = fault_lines(caplog.records)
    assert [(r.levelno, r.getMessage(), r.exc_info is not None) for r in lines] == [
        (logging.WARNING, "otel_mcp_cancel: exporting a span failed; the MCP request itself is unaffected", True),
        (logging.WARNING, "otel_mcp_cancel: exporting a span failed 8 more times since it was last logged; the MCP "
                          "requests themselves are unaffected", False),
        (logging.WARNING, "otel_mcp_cancel: exporting a span failed; the MCP request itself is unaffected", True),
    ]
    assert {r.__dict__[faults.FAULT_ATTRIBUTE] for r in lines} == {"exporting a span"}
