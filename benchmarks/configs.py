"""The telemetry set-ups compared, applied to a fresh process before any MCP object exists.

Every set-up but `none` is what production looks like: SDK providers with a batch span processor
and a periodic metric reader, exporting OTLP/HTTP to a local receiver.
"""

from __future__ import annotations

from typing import Any

CONFIGS = {
    "none": "(a) no tracer provider",
    "sdk": "(b) SDK providers, mcp's own spans only",
    "plugin": "(c) otel-mcp-cancel, spans and metrics",
    "plugin_spans": "(c') otel-mcp-cancel, spans only",
    "traceloop": "(d) opentelemetry-instrumentation-mcp",
    "openinference": "(d) openinference-instrumentation-mcp",
}


# The package each instrumented set-up needs (all need the OpenTelemetry SDK and OTLP exporter).
NEEDS = {
    "sdk": "opentelemetry.exporter.otlp.proto.http",
    "plugin": "otel_mcp_cancel",
    "plugin_spans": "otel_mcp_cancel",
    "traceloop": "opentelemetry.instrumentation.mcp",
    "openinference": "openinference.instrumentation.mcp",
}


def providers(otlp_endpoint: str, drop_spans: bool = False) -> tuple[Any, Any]:
    """SDK providers as production runs them: a batch span processor and a periodic metric reader at its
    default interval (60 s: a shorter one makes encoding compete with calls), exporting OTLP/HTTP.
    `drop_spans`: the batch processor's exporter drops what it is given (no encoding, no request)."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropping(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    exporter = Dropping() if drop_spans else OTLPSpanExporter(endpoint=f"{otlp_endpoint}/v1/traces")
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{otlp_endpoint}/v1/metrics"))
    return tracer_provider, MeterProvider(metric_readers=[reader])


def apply(config: str, otlp_endpoint: str, drop_spans: bool = False) -> None:
    if config == "none":
        return
    from opentelemetry import metrics, trace

    tracer_provider, meter_provider = providers(otlp_endpoint, drop_spans)
    trace.set_tracer_provider(tracer_provider)
    if config != "plugin_spans":  # spans only: leave the no-op meter provider, to split the cost
        metrics.set_meter_provider(meter_provider)
    if config in ("plugin", "plugin_spans"):
        from otel_mcp_cancel import McpCancelInstrumentor

        McpCancelInstrumentor().instrument()
    elif config == "traceloop":
        from opentelemetry.instrumentation.mcp import McpInstrumentor

        McpInstrumentor().instrument()
    elif config == "openinference":
        from openinference.instrumentation.mcp import MCPInstrumentor

        MCPInstrumentor().instrument()
