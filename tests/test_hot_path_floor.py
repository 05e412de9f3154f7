"""The floor the hot-path benchmark states the plugin's cost against records what the plugin records for a
tools/call: the same spans (name, kind, attributes), joined the same way, and the same points in the same
duration histograms. A floor that records less would make the plugin look dearer; one that records more,
cheaper."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from benchmarks import hot_path
from otel_mcp_cancel import McpCancelInstrumentor

REQUEST_ID = "jsonrpc.request.id"  # the one attribute whose value differs: each numbers its own requests
DURATIONS = ("mcp.server.operation.duration", "mcp.client.operation.duration")


def tools_calls(spans: tuple[ReadableSpan, ...]) -> list[tuple[str, SpanKind, dict[str, Any]]]:
    """Each tools/call span's name, kind and attributes (the request id's presence, not its value)."""
    return [(span.name, span.kind, {key: "id" if key == REQUEST_ID else value
                                    for key, value in span.attributes.items()})
            for span in spans
            if span.attributes.get("mcp.method.name") == "tools/call"]


def joined(spans: tuple[ReadableSpan, ...]) -> bool:
    """Whether every tools/call SERVER span started from a remote parent in the trace of a CLIENT span (on mcp
    2.x with a global provider, as here, the parent is the SDK's own client span beneath ours)."""
    traces = {span.context.trace_id for span in spans if span.kind is SpanKind.CLIENT}
    servers = [span for span in spans if span.kind is SpanKind.SERVER and span.attributes.get(REQUEST_ID)]
    return bool(servers) and all(span.parent is not None and span.parent.is_remote
                                 and span.context.trace_id in traces for span in servers)


def duration_points(reader: InMemoryMetricReader, scope: str) -> dict[str, list[tuple[dict[str, Any], int]]]:
    """Each duration histogram's tools/call points (attributes, count) that `scope` recorded."""
    points: dict[str, list[tuple[dict[str, Any], int]]] = {name: [] for name in DURATIONS}
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data is not None else ():
        for scope_metrics in resource_metrics.scope_metrics:
            if scope_metrics.scope.name != scope:
                continue
            for metric in scope_metrics.metrics:
                if metric.name in points:
                    points[metric.name] += [(dict(point.attributes), point.count) for point in metric.data.data_points
                                            if point.attributes.get("mcp.method.name") == "tools/call"]
    return points


@pytest.fixture
def counted_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hot_path, "SPAN_ENDS", hot_path.span_ends())


@pytest.mark.usefixtures("counted_spans")
def test_the_propagated_floor_records_what_the_plugin_records() -> None:
    calls = 1 + hot_path.WARM_UP  # a block makes its warming calls first
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[reader])

    floor = hot_path.Floor(tracer_provider, meter_provider, propagates=True)
    anyio.run(hot_path.traffic_block, 1, None, None, None, 1, floor)
    floor_spans = exporter.get_finished_spans()
    exporter.clear()
    instrumentor = McpCancelInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        anyio.run(hot_path.traffic_block, 1, None, None, None)
    finally:
        instrumentor.uninstrument()
    plugin_spans = exporter.get_finished_spans()

    assert floor.unjoined == 0
    plugin = tools_calls(plugin_spans)
    assert len(plugin) == 2 * calls
    assert sorted(tools_calls(floor_spans), key=repr) == sorted(plugin, key=repr)
    assert joined(floor_spans) and joined(plugin_spans)
    floor_points, plugin_points = duration_points(reader, "floor"), duration_points(reader, "otel_mcp_cancel")
    assert floor_points == plugin_points
    assert all(points and points[0][1] == calls for points in plugin_points.values())
