"""The shipped collector pipeline and Jaeger, run for real: the collector built from
collector-config/builder-config.yaml with the shipped config as written (but for its addresses), Jaeger v2
with memory storage, and an unchanged server under `opentelemetry-instrument` exporting OTLP to the
collector. Skipped unless --backends (CI builds both with .ci/build-backends and runs these)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from mcp.client.stdio import StdioServerParameters, stdio_client

from examples.otlp_sink import exporter_environment
from tests.backends import (
    SHIPPED_COLLECTOR_CONFIG,
    eventually,
    run_backend,
    running_collector,
    running_jaeger,
    series,
    validate,
)
from tests.prometheus_server import Prometheus
from tests.raw_peer import raw_peer_over
from tests.subprocess_servers import gated_ghost, ghost_then_retry, instrumented_command
from tests.test_pipelines import COLLECTOR_COMPONENTS, alert_queries, dashboard_queries, values

# Real collectors and Jaeger on a loaded machine (CI runs two environments at a time): minutes, past the
# suite's 120 s a test.
pytestmark = [pytest.mark.anyio, pytest.mark.backends, pytest.mark.timeout(300)]

SERVICE = exporter_environment("")["OTEL_SERVICE_NAME"]
ALERTS = SHIPPED_COLLECTOR_CONFIG.parent / "prometheus" / "alerts.yaml"
FINDING_IT = SHIPPED_COLLECTOR_CONFIG.parent.parent / "docs" / "finding-it.md"


def test_every_shipped_collector_config_loads_in_the_built_collector() -> None:
    for config in sorted(SHIPPED_COLLECTOR_CONFIG.parent.glob("otelcol*.yaml")):
        result = validate(config)
        assert result.returncode == 0, (config.name, result.stderr)


def test_the_built_backends_say_their_release_and_the_collector_is_built_of_what_the_configs_name() -> None:
    assert run_backend("otelcol-mcp", "--version") == "otelcol-mcp version 0.161.0"
    assert run_backend("jaeger", "--version").startswith("jaeger version v1.75.0")
    components = yaml.safe_load(run_backend("otelcol-mcp", "components"))
    built = {kind: {component["name"] for component in components[kind]} for kind in COLLECTOR_COMPONENTS}
    assert built == COLLECTOR_COMPONENTS


async def test_the_shipped_collector_config_starts_without_a_warning(tmp_path: Path) -> None:
    """No deprecated component name, nothing else to warn of: read from the collector's own start-up log."""
    with running_jaeger(tmp_path) as jaeger, running_collector(tmp_path, jaeger):
        pass
    log = (tmp_path / "collector.log").read_text()
    assert "Everything is ready" in log
    assert [line for line in log.splitlines() if "\twarn\t" in line or "deprecated" in line] == []


def documented_jaeger_query() -> str:
    """The API path docs/finding-it.md gives for Jaeger's "unsafe ghosts in the last hour"."""
    (row,) = [line for line in FINDING_IT.read_text().splitlines() if line.startswith("| Jaeger |")]
    return re.search(r"\(API: `([^`]+)`\)", row).group(1)


async def test_a_ghost_and_its_retry_through_the_collector_into_jaeger_and_prometheus(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    with running_jaeger(tmp_path) as jaeger, running_collector(tmp_path, jaeger) as collector:
        command, *args = instrumented_command(vault)
        # Delta temporality, as docs/finding-it.md advises a short-lived server whose exemplars matter: the
        # stdio server exports again as its caller leaves and as it exits, and under cumulative temporality
        # those exports' points, carrying no exemplar, replace the one that did in the collector's exporter.
        environment = {**exporter_environment(collector.endpoint),
                       "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "delta"}
        parameters = StdioServerParameters(command=command, args=args, env=environment)
        async with stdio_client(parameters) as streams, raw_peer_over(*streams) as peer:
            await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
            await peer.call(2, "tools/call", {"name": "broken", "arguments": {"text": "hi"}})
            await ghost_then_retry(peer, vault)  # 100 a ghost (unsafe); 101, 102 and the retry 103 ok

        # Tail sampling keeps every trace with a cancel, a ghost, a retry or an error.
        await eventually(lambda: len(jaeger.traces(SERVICE, {"tool.retried_ghost_risk": "unsafe"})) == 1)
        assert len(jaeger.traces(SERVICE, {"tool.outcome": "cancelled"})) == 1
        assert len(jaeger.traces(SERVICE, {"tool.ghost_risk": "unsafe"})) == 1
        assert len(jaeger.traces(SERVICE, {"error.type": "tool_error"})) == 1
        (ghost_trace,) = jaeger.traces(SERVICE, {"tool.ghost_risk": "unsafe"})
        (retry_trace,) = jaeger.traces(SERVICE, {"tool.retried_ghost_risk": "unsafe"})
        (ghost,) = [s for s in ghost_trace["spans"] if s["operationName"] == "tools/call shielded_write"]
        (retry,) = [s for s in retry_trace["spans"] if s["operationName"] == "tools/call shielded_write"]
        assert ghost["spanID"] in {reference["spanID"] for reference in retry["references"]}  # its link
        # docs/finding-it.md's Jaeger query for "unsafe ghosts in the last hour", as written.
        assert [trace["traceID"] for trace in jaeger.get(documented_jaeger_query())] == [ghost_trace["traceID"]]

        # Span metrics count every span, measured before sampling; our own metrics pass through.
        def counted() -> bool:
            scrape = collector.scrape()
            return series(scrape, "traces_span_metrics_calls_total", span_kind="SPAN_KIND_SERVER",
                          span_name="tools/call shielded_write") == 2
        await eventually(counted)
        scrape = collector.scrape()
        by_outcome = {outcome: series(scrape, "traces_span_metrics_calls_total", span_kind="SPAN_KIND_SERVER",
                                      mcp_method_name="tools/call", tool_outcome=outcome)
                      for outcome in ("ok", "failed", "cancelled")}
        assert by_outcome == {"ok": 4, "failed": 1, "cancelled": 1}
        assert series(scrape, "tool_ghost_responses_total", tool_ghost_risk="unsafe") == 1
        assert series(scrape, "tool_ghost_retries_total", tool_ghost_risk="unsafe") == 1
        assert "timed out after" not in scrape  # the peer's reason text is never a label

        # Exemplars, end to end: the collector exposes them (OpenMetrics), a Prometheus with exemplar storage
        # keeps them, and the ghost counter's points at the ghost's trace, which Jaeger holds.
        prometheus = Prometheus(tmp_path, collector.prometheus_port, ALERTS, "--enable-feature=exemplar-storage",
                                collector=True)
        try:
            await eventually(lambda: prometheus.exemplars("tool_ghost_responses_total") != [])
            (exemplar,) = prometheus.exemplars("tool_ghost_responses_total")
            assert exemplar["trace_id"] == ghost_trace["traceID"]
            # The duration histogram's buckets carry their requests' traces, the ghost's among them.
            durations = prometheus.exemplars('mcp_server_operation_duration_seconds_bucket{tool_outcome="cancelled"}')
            assert ghost_trace["traceID"] in {labels["trace_id"] for labels in durations}
        finally:
            prometheus.stop()



def documented_replicas_query(fingerprint: str) -> str:
    """The API path docs/finding-it.md gives for a ghost's retries on any replica, for this fingerprint."""
    (line,) = [line for line in FINDING_IT.read_text().splitlines() if "tool.call_fingerprint" in line
               and "/api/traces" in line]
    return re.search(r"`(/api/traces[^`]+)`", line).group(1).replace("<fingerprint>", fingerprint)


async def test_a_ghost_and_its_retry_on_another_replica_are_joined_by_their_fingerprint(tmp_path: Path) -> None:
    """Two replicas with the shared key, each exporting to Jaeger: the ghost on one, its retry on the other
    (which cannot link it); docs/finding-it.md's query by the ghost's fingerprint finds both traces."""
    with running_jaeger(tmp_path) as jaeger:
        environment = {**exporter_environment(jaeger.endpoint),
                       "OTEL_PYTHON_MCP_CANCEL_FINGERPRINT_KEY": "replicas-share-this"}
        vaults = [tmp_path / "first", tmp_path / "second"]
        for replica, vault in enumerate(vaults):
            vault.mkdir()
            command, *args = instrumented_command(vault)
            async with stdio_client(StdioServerParameters(command=command, args=args, env=environment)) as streams, \
                    raw_peer_over(*streams) as peer:
                if replica == 0:
                    await gated_ghost(peer, vault)  # 100: a ghost of shielded_write g.md
                else:
                    await peer.call(1, "tools/call", {"name": "release", "arguments": {}})
                    await peer.call(103, "tools/call", {"name": "shielded_write", "arguments": {"name": "g.md"}})

        def calls() -> list[dict]:
            return [span for trace in jaeger.traces(SERVICE) for span in trace["spans"]
                    if span["operationName"] == "tools/call shielded_write"]
        await eventually(lambda: len(calls()) == 2)
        tags = [{tag["key"]: tag["value"] for tag in span["tags"]} for span in calls()]
        (ghost,) = [tag for tag in tags if "tool.ghost_risk" in tag]
        (retry,) = [tag for tag in tags if "tool.ghost_risk" not in tag]
        assert "tool.retried_ghost_risk" not in retry  # the other replica could not link it
        joined = jaeger.get(documented_replicas_query(ghost["tool.call_fingerprint"]))
        assert len(joined) == 2 and retry["tool.call_fingerprint"] == ghost["tool.call_fingerprint"]


async def test_spans_from_other_instrumentations_get_an_outcome_in_the_pipeline(tmp_path: Path) -> None:
    """The shipped transform gives a tools/call span that has no tool.outcome (another instrumentation's) one
    from its status, and leaves alone a call that created a task: its task's span will say."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind, Status, StatusCode

    service = "another-mcp-instrumentation"
    with running_jaeger(tmp_path) as jaeger, running_collector(tmp_path, jaeger) as collector:
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(f"{collector.endpoint}/v1/traces")))
        tracer = provider.get_tracer("another")
        for status, extra in ((StatusCode.ERROR, {}), (StatusCode.UNSET, {}),
                              (StatusCode.UNSET, {"mcp.task.status": "working"})):
            span = tracer.start_span("tools/call lookup", kind=SpanKind.SERVER,
                                     attributes={"mcp.method.name": "tools/call", **extra})
            span.set_status(Status(status))
            span.end()
        provider.shutdown()

        def calls(**labels: str) -> float:
            return series(collector.scrape(), "traces_span_metrics_calls_total", service_name=service, **labels)

        await eventually(lambda: calls() == 3)
        assert (calls(tool_outcome="failed"), calls(tool_outcome="ok"), calls(mcp_task_status="working")) == (1, 1, 1)
        creating = [line for line in collector.scrape().splitlines() if 'mcp_task_status="working"' in line]
        assert creating and not any('tool_outcome="' in line for line in creating)
        await eventually(lambda: len(jaeger.traces(service, {"tool.outcome": "failed"})) == 1)  # kept: an error


async def test_panels_and_alerts_over_sessions_name_each_server_behind_one_collector(tmp_path: Path) -> None:
    """Two servers export to one collector; Prometheus scrapes the collector with the shipped job (honor_labels):
    the sessions panel has a row per server, named by its service.name and service.instance.id, and the session
    alert groups by the same labels."""
    replicas = {"notes-east": "east-1", "notes-west": "west-1"}
    with running_jaeger(tmp_path) as jaeger, running_collector(tmp_path, jaeger) as collector:
        prometheus = Prometheus(tmp_path, collector.prometheus_port, ALERTS, collector=True)
        try:
            for service, instance in replicas.items():
                vault = tmp_path / service
                vault.mkdir()
                command, *args = instrumented_command(vault)
                environment = {**exporter_environment(collector.endpoint), "OTEL_SERVICE_NAME": service,
                               "OTEL_RESOURCE_ATTRIBUTES": f"service.instance.id={instance}"}
                async with stdio_client(StdioServerParameters(command=command, args=args, env=environment)) as \
                        streams, raw_peer_over(*streams) as peer:
                    await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
            (panel,) = dashboard_queries()["Sessions by how they ended, per server (since the server started)"]
            expected = {(service, instance, ""): 1.0 for service, instance in replicas.items()}
            await eventually(lambda: values(prometheus.query(panel), "job", "instance", "error_type") == expected)
        finally:
            prometheus.stop()
    alert = alert_queries()["McpSessionEndedByError"]
    assert re.search(r"sum by \(([^)]*)\)", panel).group(1) == re.search(r"sum by \(([^)]*)\)", alert).group(1)
    assert "$labels.job" in yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"][-1]["annotations"]["summary"]
