"""Findable in every backend: metrics point at their traces (exemplars), and nothing an operator counts on
depends on the trace being sampled."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from mcp.client.stdio import StdioServerParameters, stdio_client
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, TraceIdRatioBased

from examples.otlp_sink import OtlpSink, exporter_environment
from otel_mcp_cancel import ghost_stats
from tests.conftest import Captured, instrumentation, is_request_span
from tests.raw_peer import RawPeer, is_result, raw_peer_over, raw_session
from tests.servers import Gates, make_ghost, notes_server
from tests.subprocess_servers import ghost_then_retry, instrumented_command
from tests.support import is_ghost_line, until

pytestmark = pytest.mark.anyio

CALLS = 40  # ok, failed, then one ghost
SCOPE = "otel_mcp_cancel"


async def traffic(peer: RawPeer, gates: Gates) -> None:
    """CALLS - 1 answered calls (half ok, half failed), then one ghost."""
    for n in range(CALLS - 1):
        tool = "echo" if n % 2 else "broken"
        assert is_result(await peer.call(n, "tools/call", {"name": tool, "arguments": {"text": "x"}}))
    await make_ghost(peer, gates, "ghost", "shielded_write", "a.md")
    await peer.barrier("ghost-done")


def captured_with(sampler: Any = None) -> tuple[Captured, TracerProvider, MeterProvider]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(**({"sampler": sampler} if sampler is not None else {}))
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    return Captured(spans, reader), tracer_provider, MeterProvider(metric_readers=[reader])


async def test_metrics_carry_exemplars_that_point_at_their_spans() -> None:
    """The SDK's default exemplar filter (trace_based) keeps the trace of a measurement made in a sampled span."""
    captured, tracer_provider, meter_provider = captured_with()
    gates = Gates()
    with instrumentation(tracer_provider=tracer_provider, meter_provider=meter_provider):
        async with raw_session(notes_server(gates)) as peer:
            await traffic(peer, gates)
    spans = {(s.context.trace_id, s.context.span_id): s for s in captured.request_spans()}
    metrics = captured.collect()
    durations = [p for p in metrics["mcp.server.operation.duration"] if "tool.outcome" in p.attributes]
    for point in durations:
        assert point.exemplars, dict(point.attributes)
        for exemplar in point.exemplars:
            span = spans[(exemplar.trace_id, exemplar.span_id)]
            assert span.attributes["tool.outcome"] == point.attributes["tool.outcome"]
            assert span.attributes["gen_ai.tool.name"] == point.attributes["gen_ai.tool.name"]
    (ghosts,) = metrics["tool.ghost_responses"]
    (exemplar,) = ghosts.exemplars
    ghost = spans[(exemplar.trace_id, exemplar.span_id)]
    assert ghost.attributes["jsonrpc.request.id"] == "ghost" and "tool.handler_outcome" in ghost.attributes


@pytest.mark.parametrize("sampler", [ALWAYS_OFF, TraceIdRatioBased(0.1), TraceIdRatioBased(0.01)],
                         ids=["always_off", "ratio_0.1", "ratio_0.01"])
async def test_outcomes_and_ghosts_do_not_depend_on_sampling(sampler: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="otel_mcp_cancel")
    captured, tracer_provider, meter_provider = captured_with(sampler)
    gates = Gates()
    with instrumentation(tracer_provider=tracer_provider, meter_provider=meter_provider):
        async with raw_session(notes_server(gates)) as peer:
            await traffic(peer, gates)
        assert ghost_stats().total == 1  # counted while instrumented; uninstrument() forgets it
    counts = {
        p.attributes["tool.outcome"]: p.count
        for p in captured.points("mcp.server.operation.duration")
        if "tool.outcome" in p.attributes
    }
    assert counts == {"ok": (CALLS - 1) // 2, "failed": CALLS - 1 - (CALLS - 1) // 2, "cancelled": 1}
    assert [p.value for p in captured.points("tool.ghost_responses")] == [1]
    warnings = [r for r in caplog.records if r.name == "otel_mcp_cancel" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and is_ghost_line(warnings[0].getMessage())
    assert ghost_stats().total == 0
    assert len(captured.request_spans()) < CALLS  # what was sampled out is not exported


async def test_the_ghost_warning_reaches_an_otlp_backend_tied_to_its_span(sink: OtlpSink, tmp_path: Path) -> None:
    """A server under `opentelemetry-instrument` with OTLP logs on: the ghost's log record carries the ghost
    span's trace and span ids, severity WARN, and the facts as attributes."""
    command, *args = instrumented_command(tmp_path)
    environment = {
        **exporter_environment(sink.endpoint),
        "OTEL_LOGS_EXPORTER": "otlp_proto_http",
        "OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED": "true",
        "OTEL_BLRP_SCHEDULE_DELAY": "200",
    }
    async with stdio_client(StdioServerParameters(command=command, args=args, env=environment)) as streams:
        async with raw_peer_over(*streams) as peer:
            await ghost_then_retry(peer, tmp_path)
            await until(lambda: any(log.severity_text == "WARN" for log in sink.logs), seconds=30)
            await until(lambda: any(s.attributes.get("jsonrpc.request.id") == "100" for s in sink.server_spans()))
    requests = [s for s in sink.server_spans(SCOPE) if is_request_span(s)]
    (ghost,) = [s for s in requests if s.attributes["jsonrpc.request.id"] == "100"]
    (warning,) = [log for log in sink.logs if log.severity_text == "WARN"]
    assert (warning.trace_id, warning.span_id) == (ghost.trace_id, ghost.span_id)
    assert is_ghost_line(warning.body) and "tool 'shielded_write' (request id 100," in warning.body
    facts = {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "shielded_write",
        "jsonrpc.request.id": "100",
        "tool.handler_outcome": "ok",
        "tool.ghost_risk": "unsafe",
    }
    assert {key: warning.attributes.get(key) for key in facts} == facts
    # One string end to end: the log's facts are the span's attributes.
    assert {key: ghost.attributes[key] for key in facts} == facts


async def test_with_no_traces_exported_every_point_and_the_ghost_still_are(sink: OtlpSink, tmp_path: Path) -> None:
    """`OTEL_TRACES_EXPORTER=none` under `opentelemetry-instrument`, metrics on: no span leaves the process, and
    the duration points and the ghost counter are whole (docs/operations.md's settings)."""
    command, *args = instrumented_command(tmp_path)
    environment = {**exporter_environment(sink.endpoint), "OTEL_TRACES_EXPORTER": "none"}
    async with stdio_client(StdioServerParameters(command=command, args=args, env=environment)) as streams:
        async with raw_peer_over(*streams) as peer:
            await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
            await ghost_then_retry(peer, tmp_path)  # 100 a ghost; 101, 102 and 103 ok
            await until(lambda: [p.value for p in sink.latest_points("tool.ghost_responses")] == [1], seconds=30)

            def calls() -> Counter:
                counted: Counter = Counter()
                for point in sink.latest_points("mcp.server.operation.duration"):
                    if point.attributes.get("mcp.method.name") == "tools/call":
                        counted[point.attributes["tool.outcome"]] += point.value
                return counted

            await until(lambda: calls() == Counter(ok=4, cancelled=1), seconds=30)
    assert sink.spans == []
