from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from examples.otlp_sink import OtlpSink
from otel_mcp_cancel import McpCancelInstrumentor
from tests.frameworks import FRAMEWORKS, Framework
from tests.support import MCP_MAJOR

# Tests that only make sense on one SDK line live in its own folder.
collect_ignore = ["v1"] if MCP_MAJOR == 2 else ["v2"]

LONG_OPTION = "--long"
BACKENDS_OPTION = "--backends"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        LONG_OPTION,
        action="store_true",
        help="also run the tests marked `long` (benchmark runs, valgrind counts, fresh installs): CI does",
    )
    parser.addoption(
        BACKENDS_OPTION,
        action="store_true",
        help="also run the tests marked `backends`, against the collector and Jaeger that .ci/build-backends "
        "builds; they fail, not skip, if the binaries are missing (CI runs them in one environment)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The default run skips the long tests and those that need the backends, so that it passes in a few
    minutes on any machine."""
    from tests.backends import backends_bin, missing_binaries

    skips = {
        "long": None if config.getoption(LONG_OPTION) else f"long: run with {LONG_OPTION} (CI does)",
        "backends": None if config.getoption(BACKENDS_OPTION) else (
            f"backends: run with {BACKENDS_OPTION} after .ci/build-backends (CI does, in one environment)"),
    }
    missing = missing_binaries() if config.getoption(BACKENDS_OPTION) else []
    for item in items:
        for marker, reason in skips.items():
            if reason is not None and item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.skipif(True, reason=reason), append=False)  # first: the reason given
        if missing and item.get_closest_marker("backends") is not None:
            item.fixturenames.append("_backends_present")
    config.stash[_MISSING] = (missing, backends_bin())


_MISSING = pytest.StashKey[tuple[list[str], Any]]()


@pytest.fixture
def _backends_present(request: pytest.FixtureRequest) -> None:
    """Asked for --backends, and the binaries are not there: a failure, never a skip."""
    missing, where = request.config.stash[_MISSING]
    pytest.fail(f"--backends: {', '.join(missing)} missing from {where}: run .ci/build-backends first")


# One global provider for the whole session: the SDK's own OpenTelemetryMiddleware
# traces through the global provider, so its spans (if any) land here too.
SPANS = InMemorySpanExporter()
TRACER_PROVIDER = TracerProvider()
TRACER_PROVIDER.add_span_processor(SimpleSpanProcessor(SPANS))
trace.set_tracer_provider(TRACER_PROVIDER)


def is_request_span(span: Any) -> bool:
    """A request's span, in-process or received over OTLP: not a notification's (which has no request id)."""
    return "jsonrpc.request.id" in span.attributes


@pytest.fixture(params=FRAMEWORKS, ids=repr)
def framework(request: pytest.FixtureRequest) -> Framework:
    """Each server framework the outcome contract holds for (tests/frameworks.py)."""
    return request.param


@pytest.fixture(params=["asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@dataclass
class Captured:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def server_spans(self) -> list[ReadableSpan]:
        return [span for span in self.spans.get_finished_spans() if span.kind is SpanKind.SERVER]

    def request_spans(self) -> list[ReadableSpan]:
        """SERVER spans of requests, not of notifications."""
        return [span for span in self.server_spans() if is_request_span(span)]

    def of_kind(self, kind: SpanKind) -> list[ReadableSpan]:
        return [span for span in self.spans.get_finished_spans() if span.kind is kind]

    def client_and_server(self, name: str) -> tuple[ReadableSpan, ReadableSpan]:
        """The CLIENT span and the SERVER span of one request, by span name."""
        (client,) = [span for span in self.of_kind(SpanKind.CLIENT) if span.name == name]
        (server,) = [span for span in self.of_kind(SpanKind.SERVER) if span.name == name]
        return client, server

    def server_span(self, method: str) -> ReadableSpan:
        matching = [span for span in self.server_spans() if span.attributes.get("mcp.method.name") == method]
        assert len(matching) == 1, [span.name for span in self.server_spans()]
        return matching[0]

    def points(self, metric_name: str) -> list:
        return self.collect().get(metric_name, [])

    def collect(self) -> dict[str, list]:
        """Every metric's points from one collection (a collection resets the exemplars it reported)."""
        data = self.metrics.get_metrics_data()
        found: dict[str, list] = {}
        for resource_metrics in data.resource_metrics if data else []:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found


@contextmanager
def instrumentation(**instrument_kwargs: Any) -> Iterator[McpCancelInstrumentor]:
    """Instrumented with these `instrument()` arguments (the session's tracer provider unless given), then not
    (unless the test uninstrumented it itself)."""
    instrumentor = McpCancelInstrumentor()
    instrumentor.instrument(**{"tracer_provider": TRACER_PROVIDER, **instrument_kwargs})
    try:
        yield instrumentor
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()


@contextmanager
def instrumented(monkeypatch: pytest.MonkeyPatch, **environment: str) -> Iterator[Captured]:
    """Instrumented with the given environment variables set, recording into fresh in-memory exporters."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    SPANS.clear()
    reader = InMemoryMetricReader()
    try:
        with instrumentation(meter_provider=MeterProvider(metric_readers=[reader])):
            yield Captured(SPANS, reader)
    finally:
        SPANS.clear()


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[Captured]:
    with instrumented(monkeypatch) as telemetry:
        yield telemetry


@pytest.fixture
def sink() -> Iterator[OtlpSink]:
    """A real OTLP/HTTP receiver on 127.0.0.1 for servers running in subprocesses."""
    receiver = OtlpSink().start()
    yield receiver
    receiver.stop()


@pytest.fixture
def plugin_log(caplog: pytest.LogCaptureFixture) -> Callable[[], list[logging.LogRecord]]:
    """The records this plugin logged (the SDK logs too; those are not ours)."""
    caplog.set_level(logging.WARNING, logger="otel_mcp_cancel")
    return lambda: [record for record in caplog.records if record.name == "otel_mcp_cancel"]
