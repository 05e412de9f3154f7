"""Findable in every backend: metrics point at their traces (exemplars), and nothing an operator counts on
depends on the trace being sampled."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, TraceIdRatioBased

from otel_mcp_cancel import ghost_stats
from tests.conftest import Captured, instrumentation
from tests.raw_peer import RawPeer, is_result, raw_session
from tests.servers import Gates, notes_server

pytestmark = pytest.mark.anyio

CALLS = 40  # ok, failed, then one ghost


async def traffic(peer: RawPeer, gates: Gates) -> None:
    """CALLS - 1 answered calls (half ok, half failed), then one ghost."""
    for n in range(CALLS - 1):
        tool = "echo" if n % 2 else "broken"
        assert is_result(await peer.call(n, "tools/call", {"name": tool, "arguments": {"text": "x"}}))
    await peer.request("ghost", "tools/call", {"name": "shielded_write", "arguments": {"path": "a.md"}})
    await gates.started.wait()
    await peer.cancel("ghost", "stop")
    await peer.barrier("cancel-read")
    gates.let_go()
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
    (ghosts,) = metrics["mcp.server.ghost_responses"]
    (exemplar,) = ghosts.exemplars
    ghost = spans[(exemplar.trace_id, exemplar.span_id)]
    assert ghost.attributes["jsonrpc.request.id"] == "ghost" and "tool.handler_outcome" in ghost.attributes


@pytest.mark.parametrize("sampler", [ALWAYS_OFF, TraceIdRatioBased(0.1)], ids=["always_off", "ratio_0.1"])
async def test_outcomes_and_ghosts_do_not_depend_on_sampling(sampler: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="otel_mcp_cancel")
    captured, tracer_provider, meter_provider = captured_with(sampler)
    gates = Gates()
    before = ghost_stats().total
    with instrumentation(tracer_provider=tracer_provider, meter_provider=meter_provider):
        async with raw_session(notes_server(gates)) as peer:
            await traffic(peer, gates)
    counts = {
        p.attributes["tool.outcome"]: p.count
        for p in captured.points("mcp.server.operation.duration")
        if "tool.outcome" in p.attributes
    }
    assert counts == {"ok": (CALLS - 1) // 2, "failed": CALLS - 1 - (CALLS - 1) // 2, "cancelled": 1}
    assert [p.value for p in captured.points("mcp.server.ghost_responses")] == [1]
    warnings = [r for r in caplog.records if r.name == "otel_mcp_cancel" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].getMessage().startswith("mcp.ghost_response.suppressed")
    assert ghost_stats().total == before + 1
    assert len(captured.request_spans()) < CALLS  # what was sampled out is not exported
