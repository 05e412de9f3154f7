"""From span to dashboard: the shipped collector config, Grafana dashboard and alert rules, checked
statically and against a real Prometheus scraping an instrumented server."""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml
from mcp.client.stdio import StdioServerParameters, stdio_client

from examples.otlp_sink import OtlpSink, exporter_environment
from otel_mcp_cancel import conventions
from tests.prometheus_server import Prometheus
from tests.raw_peer import RawPeer, raw_peer_over
from tests.subprocess_servers import (
    HttpServer,
    free_port,
    gated_ghost,
    ghost_then_retry,
    http_streams,
    instrumented_command,
    require_debian_binary,
)
from tests.support import MCP_MAJOR, until

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "collector-config"
COLLECTOR = CONFIG / "otelcol-contrib.yaml"
DASHBOARD = CONFIG / "grafana" / "dashboards" / "mcp-tool-outcomes.json"
ALERTS = CONFIG / "prometheus" / "alerts.yaml"
README = ROOT / "README.md"
FINDING_IT = ROOT / "docs" / "finding-it.md"


def documented_query(backend: str) -> str:
    """The query docs/finding-it.md gives for a backend (the first code span of its row)."""
    (row,) = [line for line in FINDING_IT.read_text().splitlines() if line.startswith(f"| {backend} |")]
    return re.search(r"`([^`]+)`", row).group(1)

# What builder-config.yaml builds, by the names v0.161.0 gives its components (deprecated aliases left out:
# the collector warns at start for each). tests/test_backends.py checks it against the built collector.
COLLECTOR_COMPONENTS = {
    "receivers": {"otlp"},
    "processors": {"batch", "memory_limiter", "transform", "tail_sampling"},
    "exporters": {"otlp_grpc", "otlp_http", "debug", "prometheus", "file", "load_balancing"},
    "connectors": {"span_metrics", "forward"},
}


def dashboard_queries() -> dict[str, list[str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return {panel["title"]: [target["expr"] for target in panel["targets"]] for panel in panels}


def alert_queries() -> dict[str, str]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


def prometheus_name(name: str) -> str:
    return name.replace(".", "_")


def test_the_collector_config_names_only_built_components_by_current_names_and_defined_ones() -> None:
    for shipped in sorted(CONFIG.glob("otelcol*.yaml")):
        for kind, known in COLLECTOR_COMPONENTS.items():
            for component in yaml.safe_load(shipped.read_text()).get(kind, {}):
                assert component.split("/")[0] in known, f"{shipped.name}: {kind}: {component}"
    config = yaml.safe_load(COLLECTOR.read_text())
    pipelines = config["service"]["pipelines"]
    for name, pipeline in pipelines.items():
        for receiver in pipeline["receivers"]:
            assert receiver in config["receivers"] or receiver in config["connectors"], (name, receiver)
        for processor in pipeline.get("processors", []):
            assert processor in config["processors"], (name, processor)
        for exporter in pipeline["exporters"]:
            assert exporter in config["exporters"] or exporter in config["connectors"], (name, exporter)
    # A connector joins two pipelines: it must be an exporter in one and a receiver in another.
    for connector in config["connectors"]:
        assert any(connector in p["exporters"] for p in pipelines.values()), connector
        assert any(connector in p["receivers"] for p in pipelines.values()), connector


def test_every_kept_trace_is_chosen_before_sampling_and_every_span_measured_before_it() -> None:
    """Tail sampling keeps each trace with a cancelled call, a ghost, a retry of a ghost or of a call its client
    gave up on, a task or an error, and a kept trace's late spans (a task's); spanmetrics sees every span,
    sampled or not."""
    config = yaml.safe_load(COLLECTOR.read_text())
    kept = {
        policy["string_attribute"]["key"]: set(policy["string_attribute"]["values"])
        for policy in config["processors"]["tail_sampling"]["policies"]
        if policy["type"] == "string_attribute"
    }
    assert kept == {
        conventions.TOOL_OUTCOME: {conventions.OUTCOME_CANCELLED},
        conventions.TOOL_HANDLER_OUTCOME: {conventions.OUTCOME_OK, conventions.OUTCOME_FAILED},
        conventions.TOOL_RETRIED_GHOST_RISK: set(conventions.GHOST_RISKS),
        conventions.TOOL_RETRIED_CANCEL_REASON: {conventions.CANCEL_REASON_TIMEOUT, conventions.CANCEL_REASON_CALLER},
        conventions.MCP_TASK_STATUS: {conventions.TASK_WORKING},  # what a task's creating span says
    }
    assert config["processors"]["tail_sampling"]["decision_cache"]["sampled_cache_size"] > 0
    pipelines = config["service"]["pipelines"].values()
    (measuring,) = [p for p in pipelines if "span_metrics" in p["exporters"]]
    (sampling,) = [p for p in pipelines if "tail_sampling" in p.get("processors", [])]
    assert "tail_sampling" not in measuring["processors"] and measuring is not sampling
    assert set(sampling["receivers"]) <= set(measuring["exporters"])  # fed by the measuring pipeline
    assert "otlp_grpc/jaeger" in sampling["exporters"]


def test_span_metrics_panels_use_only_configured_dimensions() -> None:
    dimensions = {d["name"] for d in yaml.safe_load(COLLECTOR.read_text())["connectors"]["span_metrics"]["dimensions"]}
    for attribute in (conventions.TOOL_HANDLER_OUTCOME, conventions.TOOL_GHOST_RISK, conventions.TOOL_CANCEL_REASON,
                      conventions.TOOL_RETRIED_GHOST_RISK, conventions.TOOL_RETRIED_CANCEL_REASON):
        assert attribute in dimensions
    labels = {prometheus_name(name) for name in dimensions} | {"service_name", "span_kind", "span_name", "status_code"}
    span_queries = [q for qs in dashboard_queries().values() for q in qs if "traces_span_metrics" in q]
    span_queries.append(documented_query("Prometheus (spanmetrics, any language's spans)"))
    assert len(span_queries) == 3
    for query in span_queries:
        used = set(re.findall(r"([a-z_]+)\s*(?:=|!=|=~)\s*\"", query)) | {
            label for group in re.findall(r"by \(([^)]*)\)", query) for label in map(str.strip, group.split(","))
        }
        assert used <= labels, used - labels


def test_no_panel_counts_with_rate_or_increase_over_a_counter() -> None:
    """rate() and increase() never see a counter's first value: a series whose only event came in its first
    export (a lone ghost) would show 0. Windowed panels subtract the value 5 minutes ago, or 0 if none."""
    for title, queries in dashboard_queries().items():
        for query in queries:
            assert not re.search(r"(rate|increase)\((?![^)]*_bucket)", query), title
            if "offset 5m" in query:
                assert "in the last 5 minutes" in title, title
                assert re.search(r"clamp_min\((.+) - \(\1 offset 5m or \1 \* 0\), 0\)", query), title


def test_promtool_accepts_the_shipped_prometheus_files() -> None:
    require_debian_binary("prometheus")
    prometheus_config = CONFIG / "prometheus" / "prometheus.yml"
    for command in (["check", "config", str(prometheus_config)], ["check", "rules", str(ALERTS)]):
        done = subprocess.run(["promtool", *command], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


def test_one_string_from_the_code_to_every_shipped_file() -> None:
    collector = COLLECTOR.read_text()
    dashboard = "\n".join(query for queries in dashboard_queries().values() for query in queries)
    alerts = ALERTS.read_text()
    readme = "\n".join(path.read_text() for path in [README, *sorted((ROOT / "docs").glob("*.md"))])
    # The collector sees OpenTelemetry names; dashboards and alerts see Prometheus' normalised ones.
    for name in (conventions.TOOL_OUTCOME, conventions.GEN_AI_TOOL_NAME, conventions.MCP_METHOD_NAME):
        assert f'"{name}"' in collector or f"name: {name}" in collector, name
    for value in (conventions.OUTCOME_OK, conventions.OUTCOME_FAILED):
        assert f'"{value}"' in collector
    assert f'== "{conventions.TOOLS_CALL}"' in collector
    for text in (dashboard, alerts):
        assert f'{prometheus_name(conventions.SERVER_OPERATION_DURATION)}_seconds' in text
        assert f"{prometheus_name(conventions.GHOST_RESPONSES)}_total" in text
        assert f"{prometheus_name(conventions.SERVER_GHOST_RETRIES)}_total" in text
        assert prometheus_name(conventions.TOOL_GHOST_RISK) in text
        assert prometheus_name(conventions.TOOL_GHOST_KIND) in text  # every ghost by kind
        assert prometheus_name(conventions.GEN_AI_TOOL_NAME) in text
        assert f'{prometheus_name(conventions.TOOL_OUTCOME)}="{conventions.OUTCOME_FAILED}"' in text
        assert f'{prometheus_name(conventions.MCP_METHOD_NAME)}="{conventions.TOOLS_CALL}"' in text
    assert f'tool_outcome="{conventions.OUTCOME_CANCELLED}"' in dashboard
    assert f'{prometheus_name(conventions.TOOL_GHOST_RISK)}="{conventions.GHOST_RISK_UNSAFE}"' in alerts
    for name in (*conventions.OUTCOMES, conventions.EVENT_GHOST_SUPPRESSED, conventions.EVENT_GHOST_RETRIED):
        assert f"`{name}`" in readme
    for alert in alert_queries():
        assert f"`{alert}`" in readme


# The traffic of test_the_shipped_promql_on_a_real_prometheus, by tool and outcome.
CALLS_PER_TOOL = {
    ("echo", "ok"): 4,
    ("broken", "failed"): 2,
    ("_OTHER", "failed"): 2,
    ("shielded_write", "cancelled"): 1,
    ("shielded_write", "ok"): 1,
    ("wait_started", "ok"): 1,
    ("release", "ok"): 1,
}


async def calls(peer: RawPeer, start: int) -> None:
    """Two ok, two failed: one tool raised, one does not exist."""
    for n, (tool, arguments) in enumerate(
        [("echo", {"text": "a"}), ("echo", {"text": "b"}), ("broken", {"text": "c"}), ("no_such_tool", {})]
    ):
        await peer.call(start + n, "tools/call", {"name": tool, "arguments": arguments})


def metric_tool_name(span) -> str:
    """The span keeps the name it was sent; metrics fold unregistered ones, as the span name does."""
    return "_OTHER" if span.name == "tools/call" else span.attributes["gen_ai.tool.name"]


def values(result: dict[tuple[tuple[str, str], ...], float], *labels: str) -> dict[tuple[str, ...], float]:
    """A query result keyed by the given labels' values."""
    return {tuple(dict(series).get(label, "") for label in labels): value for series, value in result.items()}


@pytest.mark.anyio
async def test_the_shipped_promql_on_a_real_prometheus(sink: OtlpSink, tmp_path: Path) -> None:
    metrics_port = free_port()
    command, *args = instrumented_command(tmp_path)
    environment = {
        **exporter_environment(sink.endpoint),
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
        "OTEL_EXPORTER_PROMETHEUS_PORT": str(metrics_port),
    }
    calls_per_tool = dashboard_queries()["Calls by tool and outcome (since the server started)"][0]
    prometheus = Prometheus(tmp_path, metrics_port, ALERTS)
    try:
        server = StdioServerParameters(command=command, args=args, env=environment)
        async with stdio_client(server) as (read, write):
            async with raw_peer_over(read, write) as peer:
                await calls(peer, 1)
                await ghost_then_retry(peer, tmp_path)
                await until(lambda: values(prometheus.query(calls_per_tool), "gen_ai_tool_name", "tool_outcome")
                            .get(("echo", "ok")) == 2, seconds=30)
                await calls(peer, 11)  # the same mix again, so rates have an increase to measure
                # Every call's point scraped: a server records a call's point after its answer is written.
                await until(lambda: values(prometheus.query(calls_per_tool), "gen_ai_tool_name", "tool_outcome")
                            == CALLS_PER_TOOL, seconds=30)
                await check_every_query(prometheus, sink)
    finally:
        prometheus.stop()


async def check_every_query(prometheus: Prometheus, sink: OtlpSink) -> None:
    dashboard, alerts = dashboard_queries(), alert_queries()

    # Calls by tool and outcome: exactly what the traffic did, and exactly what the spans say.
    (per_tool,) = dashboard["Calls by tool and outcome (since the server started)"]
    expected = CALLS_PER_TOOL
    assert values(prometheus.query(per_tool), "gen_ai_tool_name", "tool_outcome") == expected

    def from_spans() -> Counter:
        return Counter(
            (metric_tool_name(span), span.attributes["tool.outcome"])
            for span in sink.server_spans("otel_mcp_cancel")
            if span.attributes["mcp.method.name"] == "tools/call"
        )

    # Spans are exported in batches of their own: wait for every tools/call span, not for any spans.
    await until(lambda: from_spans().total() >= sum(expected.values()), seconds=30)
    assert from_spans() == expected

    # Windowed panels count exactly, a series' first point included: the lone cancel, ghost and retry show.
    cancelled, failed = dashboard["Cancelled next to failed (calls in the last 5 minutes)"]
    assert list(prometheus.query(cancelled).values()) == [1.0]
    assert list(prometheus.query(failed).values()) == [4.0]

    (ghosts,) = dashboard["Ghost responses (since the server started)"]
    assert values(prometheus.query(ghosts), "gen_ai_tool_name", "tool_ghost_kind", "tool_ghost_risk") == {
        ("shielded_write", "suppressed", "unsafe"): 1}
    (retries,) = dashboard["Retries of ghosts (since the server started)"]
    assert values(prometheus.query(retries), "gen_ai_tool_name", "tool_ghost_risk") == {("shielded_write", "unsafe"): 1}
    recent_ghosts, recent_retries = dashboard["Ghosts and retries of ghosts (in the last 5 minutes)"]
    assert values(prometheus.query(recent_ghosts), "tool_ghost_risk") == {("unsafe",): 1.0}
    assert values(prometheus.query(recent_retries), "tool_ghost_risk") == {("unsafe",): 1.0}

    (p95_by_tool,) = dashboard["tools/call p95 duration by tool (seconds)"]
    by_tool = values(prometheus.query(p95_by_tool), "gen_ai_tool_name")
    # A tool called in both rounds has an increase to measure; one called once may read NaN, as in Grafana.
    assert {("echo",), ("broken",)} <= set(by_tool) <= {(tool,) for tool, _ in expected}
    assert all(math.isfinite(by_tool[(tool,)]) for tool in ("echo", "broken"))

    # Which host cancels most: the calls' client, as it named itself in initialize.
    cancels_by_client, calls_by_client = dashboard["Cancels by client, next to its calls (since the server started)"]
    cancelled_calls = sum(count for (_, outcome), count in expected.items() if outcome == "cancelled")
    assert values(prometheus.query(cancels_by_client), "mcp_client_name") == {("raw",): cancelled_calls}
    assert values(prometheus.query(calls_by_client), "mcp_client_name") == {("raw",): sum(expected.values())}

    for quantile in dashboard["tools/call duration by outcome, p50 and p95 (seconds)"]:
        by_outcome = values(prometheus.query(quantile), "tool_outcome")
        assert {("ok",), ("failed",)} <= set(by_outcome) <= {(o,) for o in conventions.OUTCOMES}
        assert all(math.isfinite(by_outcome[(o,)]) for o in ("ok", "failed"))

    # Alerts: page on the unsafe ghost and on its retry; ticket on any ghost and on failing tools.
    assert values(prometheus.query(alerts["McpUnsafeGhostResponse"]), "gen_ai_tool_name") == {("shielded_write",): 1}
    assert values(prometheus.query(alerts["McpGhostRetried"]), "gen_ai_tool_name", "tool_ghost_risk") == {
        ("shielded_write", "unsafe"): 1
    }
    assert values(prometheus.query(alerts["McpGhostResponse"]), "gen_ai_tool_name", "tool_ghost_risk") == {
        ("shielded_write", "unsafe"): 1
    }
    assert values(prometheus.query(alerts["McpToolFailedRatioHigh"]), "gen_ai_tool_name") == {
        ("broken",): 1.0,
        ("_OTHER",): 1.0,
    }

    # The documented "unsafe ghosts in the last hour", and the page examples/README.md sends you to.
    unsafe_last_hour = documented_query("Prometheus (our counter)")
    assert values(prometheus.query(unsafe_last_hour), "gen_ai_tool_name") == {("shielded_write",): 1}
    assert prometheus.page_status("/classic/alerts") == 200


@pytest.mark.anyio
async def test_sessions_by_how_they_ended_on_a_real_prometheus(sink: OtlpSink, tmp_path: Path) -> None:
    """Streamable HTTP sessions: one ends normally; on mcp 1.x with the guard off, a ghost ends another."""
    metrics_port = free_port()
    guard_off = {"OTEL_PYTHON_MCP_CANCEL_GHOST_GUARD": "off"} if MCP_MAJOR == 1 else {}
    prometheus = Prometheus(tmp_path, metrics_port, ALERTS)  # first: it skips where there is none
    try:
        server = HttpServer(
            sink.endpoint, tmp_path, "streamable-http",
            OTEL_METRICS_EXPORTER="prometheus",
            OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1",
            OTEL_EXPORTER_PROMETHEUS_PORT=str(metrics_port),
            **guard_off,
        )
        url = f"http://127.0.0.1:{server.port}/mcp"
        expected = {("",): 1.0}
        try:
            async with http_streams(url) as streams, raw_peer_over(*streams) as peer:
                await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
            if MCP_MAJOR == 1:
                async with http_streams(url) as streams, raw_peer_over(*streams) as peer:
                    await gated_ghost(peer, tmp_path)
                expected[("AssertionError",)] = 1.0
            (panel,) = dashboard_queries()["Sessions by how they ended, per server (since the server started)"]
            await until(lambda: values(prometheus.query(panel), "error_type") == expected, seconds=30)
            alert = alert_queries()["McpSessionEndedByError"]
            ended_by_error = {key: value for key, value in expected.items() if key != ("",)}
            await until(lambda: values(prometheus.query(alert), "error_type") == ended_by_error, seconds=30)
            assert {labels for series in prometheus.query(panel) for labels in dict(series)} == {
                "job", "instance", *(["error_type"] if MCP_MAJOR == 1 else [])
            }
        finally:
            server.stop()
    finally:
        prometheus.stop()


def test_the_shipped_stack_carries_exemplars_from_panel_to_trace() -> None:
    """What an exemplar link needs at each hop (tests/test_backends.py follows one through a real collector
    and Prometheus; Grafana cannot be had here): OpenMetrics out of the collector, exemplar storage in
    Prometheus, a trace-id destination on the data source, and panels that ask for them."""
    exporter = yaml.safe_load(COLLECTOR.read_text())["exporters"]["prometheus"]
    assert exporter["enable_open_metrics"] is True
    compose = yaml.safe_load((CONFIG / "docker-compose.yaml").read_text())["services"]
    assert "--enable-feature=exemplar-storage" in compose["prometheus"]["command"]
    sources = yaml.safe_load((CONFIG / "grafana" / "provisioning" / "datasources" / "datasources.yaml").read_text())
    by_uid = {source["uid"]: source for source in sources["datasources"]}
    (destination,) = by_uid["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert destination == {"name": "trace_id", "datasourceUid": "jaeger"} and by_uid["jaeger"]["type"] == "jaeger"
    panels = json.loads(DASHBOARD.read_text())["panels"]
    ours = [target for panel in panels if panel["type"] == "timeseries" for target in panel["targets"]
            if "mcp_server_operation_duration_seconds" in target["expr"] or "tool_ghost_" in target["expr"]]
    assert len(ours) == 7 and all(target.get("exemplar") is True for target in ours)
