"""A small OTLP/HTTP receiver that keeps what it is sent: spans, metric points and log records, decoded
from protobuf.

It listens on 127.0.0.1 only, on a free port, in a background thread. The demo
prints its tables from what arrives here, and the tests assert on it, so both
see exactly what an OTLP backend would receive.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

SPAN_KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUS_CODES = {0: "UNSET", 1: "OK", 2: "ERROR"}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def _attributes(attributes: list[KeyValue]) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in attributes}


@dataclass(frozen=True)
class ReceivedSpan:
    scope: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status: str
    start_ns: int = 0
    end_ns: int = 0
    timed_events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # span ids this span links to
    resource: dict[str, Any] = field(default_factory=dict)
    status_description: str = ""


@dataclass(frozen=True)
class ReceivedPoint:
    metric: str
    attributes: dict[str, Any]
    value: float  # a sum's value, or a histogram's count


@dataclass(frozen=True)
class ReceivedLog:
    scope: str
    severity_text: str
    body: Any
    attributes: dict[str, Any]
    trace_id: str
    span_id: str


@dataclass
class OtlpSink:
    keep: bool = True  # False: answer exports but keep nothing (a benchmark's receiver)
    spans: list[ReceivedSpan] = field(default_factory=list)
    points: list[ReceivedPoint] = field(default_factory=list)
    logs: list[ReceivedLog] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self, port: int = 0) -> OtlpSink:
        """Listen on 127.0.0.1:`port` (any free one by default; a stopped sink starts again on its own)."""
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                signals = {
                    "/v1/traces": (sink._take_traces, ExportTraceServiceResponse),
                    "/v1/metrics": (sink._take_metrics, ExportMetricsServiceResponse),
                    "/v1/logs": (sink._take_logs, ExportLogsServiceResponse),
                }
                if self.path not in signals:
                    self.send_response(404)
                    self.end_headers()
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                take, response = signals[self.path]
                if sink.keep:
                    take(body)
                reply = response().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _take_traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        received = [
            ReceivedSpan(
                scope=scope_spans.scope.name,
                name=span.name,
                kind=SPAN_KINDS.get(span.kind, "UNSPECIFIED"),
                trace_id=span.trace_id.hex(),
                span_id=span.span_id.hex(),
                parent_span_id=span.parent_span_id.hex(),
                attributes=_attributes(span.attributes),
                events=[(event.name, _attributes(event.attributes)) for event in span.events],
                status=STATUS_CODES.get(span.status.code, "UNSET"),
                start_ns=span.start_time_unix_nano,
                end_ns=span.end_time_unix_nano,
                timed_events=[(e.name, e.time_unix_nano, _attributes(e.attributes)) for e in span.events],
                links=[link.span_id.hex() for link in span.links],
                resource=_attributes(resource_spans.resource.attributes),
                status_description=span.status.message,
            )
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]
        with self._lock:
            self.spans.extend(received)

    def _take_metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        received = []
        for resource_metrics in request.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data")
                    for point in getattr(metric, kind).data_points:
                        value = point.count if kind == "histogram" else (point.as_int or point.as_double)
                        received.append(ReceivedPoint(metric.name, _attributes(point.attributes), value))
        with self._lock:
            self.points.extend(received)

    def _take_logs(self, body: bytes) -> None:
        request = ExportLogsServiceRequest.FromString(body)
        received = [
            ReceivedLog(
                scope=scope_logs.scope.name,
                severity_text=record.severity_text,
                body=_value(record.body),
                attributes=_attributes(record.attributes),
                trace_id=record.trace_id.hex(),
                span_id=record.span_id.hex(),
            )
            for resource_logs in request.resource_logs
            for scope_logs in resource_logs.scope_logs
            for record in scope_logs.log_records
        ]
        with self._lock:
            self.logs.extend(received)

    def latest_points(self, metric: str) -> list[ReceivedPoint]:
        """Cumulative metrics are re-sent each interval: keep the last point for each attribute set."""
        with self._lock:
            latest = {
                tuple(sorted(point.attributes.items())): point for point in self.points if point.metric == metric
            }
        return list(latest.values())

    def server_spans(self, scope: str | None = None) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.kind == "SERVER" and (scope is None or s.scope == scope)]


def exporter_environment(endpoint: str) -> dict[str, str]:
    """Environment for a process run under `opentelemetry-instrument` to export OTLP/HTTP to `endpoint`."""
    return {
        "OTEL_TRACES_EXPORTER": "otlp_proto_http",
        "OTEL_METRICS_EXPORTER": "otlp_proto_http",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
        "OTEL_SERVICE_NAME": "notes-mcp-server",
    }
