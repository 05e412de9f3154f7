"""The telemetry set-ups compared, applied to a fresh process before any MCP object exists.

Every set-up but `none` is what production looks like: SDK providers with a batch span processor
and a periodic metric reader, exporting OTLP/HTTP to a local receiver.
"""

from __future__ import annotations

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


def apply(config: str, otlp_endpoint: str) -> None:
    if config == "none":
        return
    from opentelemetry import metrics, trace
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{otlp_endpoint}/v1/traces")))
    trace.set_tracer_provider(tracer_provider)
    if config != "plugin_spans":  # spans only: leave the no-op meter provider, to split the cost
        # The default interval (60 s), as in production: a shorter one makes encoding compete with calls.
        reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{otlp_endpoint}/v1/metrics"))
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    if config in ("plugin", "plugin_spans"):
        from otel_mcp_cancel import McpCancelInstrumentor

        McpCancelInstrumentor().instrument()
    elif config == "traceloop":
        from opentelemetry.instrumentation.mcp import McpInstrumentor

        McpInstrumentor().instrument()
    elif config == "openinference":
        from openinference.instrumentation.mcp import MCPInstrumentor

        MCPInstrumentor().instrument()
