"""The shipped pipeline at load and at scale, run for real: an agent's client process and the gated server,
both unchanged under `opentelemetry-instrument`, exporting traces, metrics and logs over OTLP.

- 10,000 calls and more through one collector (the shipped config as written but for its addresses):
  tail sampling keeps every trace with a cancel, a ghost, a retry or an error, whole, and a tenth of the
  rest within a binomial bound; span metrics count every span; every dashboard panel and alert rule, on a
  real Prometheus scraping the collector, gives what the traffic did; the ghost's WARNING passes the logs
  pipeline tied to its span; 10,000 distinct cancel reasons from a hostile peer add no series.
- Two tiers for many replicas: an agent per process (otelcol-agent.yaml) routing by trace id to two
  gateways (otelcol-contrib.yaml), then Jaeger: every trace lands whole in one gateway, every cancelled
  or ghost trace is kept.
Skipped unless --backends (CI builds the backends with .ci/build-backends and runs these)."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.stdio import StdioServerParameters, stdio_client

from examples.otlp_sink import OtlpSink, exporter_environment
from tests.backends import (
    ROOT,
    SHIPPED_COLLECTOR_CONFIG,
    Jaeger,
    eventually,
    running_agent,
    running_collector,
    running_jaeger,
    series,
)
from tests.prometheus_server import Prometheus
from tests.raw_peer import raw_peer_over
from tests.subprocess_servers import HttpServer, instrumented_command, instrumented_script
from tests.support import is_ghost_line
from tests.test_pipelines import alert_queries, dashboard_queries, documented_query, values

# Real collectors and Jaeger on a loaded machine (CI runs two environments at a time): minutes, past the
# suite's 120 s a test.
pytestmark = [pytest.mark.anyio, pytest.mark.backends, pytest.mark.timeout(600)]

SERVER = exporter_environment("")["OTEL_SERVICE_NAME"]
AGENT = "notes-agent"
ALERTS = SHIPPED_COLLECTOR_CONFIG.parent / "prometheus" / "alerts.yaml"
LOAD_CLIENT = ROOT / "tests" / "load_client.py"
ECHOES, FAILURES, TIME_OUTS = 9_000, 1_000, 20
SAMPLED = 0.10  # the shipped config's a-tenth-of-the-rest
HOSTILE_REASONS = 10_000


def telemetry(endpoint: str, service: str) -> dict[str, str]:
    """A process's OTLP export to `endpoint`, logs on (the ghost's WARNING among them), and a span queue that
    and a log queue that hold a load test's records: one dropped in the process would make the ground truth
    wrong."""
    return {
        **exporter_environment(endpoint),
        "OTEL_SERVICE_NAME": service,
        "OTEL_LOGS_EXPORTER": "otlp_proto_http",
        "OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED": "true",
        "OTEL_BSP_MAX_QUEUE_SIZE": "100000",
        "OTEL_BLRP_MAX_QUEUE_SIZE": "100000",
        "OTEL_PYTHON_MCP_CANCEL_FINGERPRINT_KEY": "replicas-share-this",
    }


async def run_client(plan: list[dict[str, Any]], endpoint: str) -> None:
    """An agent's client process (tests/load_client.py) carrying out `plan`, exporting to `endpoint`."""
    environment = {**os.environ, **telemetry(endpoint, AGENT), "PYTHONPATH": str(ROOT)}
    with anyio.fail_after(600):
        done = await anyio.run_process(instrumented_script(LOAD_CLIENT, json.dumps(plan)), env=environment,
                                       check=False)
    assert done.returncode == 0, done.stderr.decode()[-4000:]


def spans_of(trace: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """A Jaeger trace's spans: span id -> (service, operation, tags)."""
    return {
        span["spanID"]: (trace["processes"][span["processID"]]["serviceName"], span["operationName"],
                         {tag["key"]: tag["value"] for tag in span["tags"]})
        for span in trace["spans"]
    }


def served(trace: dict[str, Any], tool: str) -> list[dict[str, Any]]:
    """The tags of the trace's server spans of tools/call `tool`."""
    return [tags for service, operation, tags in spans_of(trace).values()
            if service == SERVER and operation == f"tools/call {tool}" and tags["span.kind"] == "server"]


async def test_ten_thousand_calls_through_the_shipped_pipeline(sink: OtlpSink, tmp_path: Path) -> None:
    vault, decided = tmp_path / "vault", tmp_path / "decided"
    vault.mkdir()
    with running_jaeger(tmp_path) as jaeger, \
            running_collector(tmp_path, jaeger, decision_wait="2s", logs_to=sink.endpoint,
                              record_spans=True) as collector:
        server = telemetry(collector.endpoint, SERVER)
        plan = [{"stdio": instrumented_command(vault), "env": server, "steps": [
            # A first failure and time-out, so that their series exist before they grow (a rate needs both).
            {"call": "broken", "arguments": {"text": "hi"}},
            {"time_out": "hang", "times": 1},
            {"call": "echo", "arguments": {"text": "hi"}, "times": ECHOES, "concurrency": 8},
            {"call": "broken", "arguments": {"text": "hi"}, "times": FAILURES - 1, "concurrency": 8},
            {"time_out": "hang", "times": TIME_OUTS - 1},
            {"ghost": "g.md", "vault": str(vault), "release_when": str(decided)},
            {"call": "shielded_write", "arguments": {"name": "g.md"}},  # its retry
        ]}]
        prometheus = Prometheus(tmp_path, collector.prometheus_port, ALERTS, collector=True)
        try:
            async with anyio.create_task_group() as client:
                client.start_soon(run_client, plan, collector.endpoint)
                # The ghost's write finishes only once its caller's span has been decided and kept: the
                # server's span then arrives after its trace's decision, and joins it.
                await eventually(lambda: jaeger.traces(AGENT, {"tool.cancel_reason": "caller"}) != [], seconds=300)
                decided.touch()
            await the_spans_are_counted_before_sampling(collector)
            traces = await the_traces_that_matter_are_kept_whole(jaeger, collector)
            await every_panel_and_alert_gives_the_ground_truth(prometheus)
            await the_ghost_warning_passes_the_logs_pipeline(sink, traces)
            await hostile_reasons_add_no_series(collector, server, vault)
        finally:
            prometheus.stop()


async def the_spans_are_counted_before_sampling(collector: Any) -> None:
    def calls(kind: str, tool: str, **labels: str) -> float:
        return series(collector.scrape(), "traces_span_metrics_calls_total", span_kind=f"SPAN_KIND_{kind}",
                      span_name=f"tools/call {tool}", **labels)

    await eventually(lambda: calls("SERVER", "shielded_write") == 2 and calls("CLIENT", "shielded_write") == 2)
    for kind in ("SERVER", "CLIENT"):
        assert calls(kind, "echo", tool_outcome="ok") == ECHOES
        assert calls(kind, "broken", tool_outcome="failed") == FAILURES
        assert calls(kind, "hang", tool_outcome="cancelled") == TIME_OUTS
    assert calls("CLIENT", "hang", tool_cancel_reason="timeout") == TIME_OUTS
    assert calls("CLIENT", "shielded_write", tool_cancel_reason="caller") == 1
    assert calls("SERVER", "shielded_write", tool_ghost_risk="unsafe") == 1
    assert calls("SERVER", "shielded_write", tool_retried_ghost_risk="unsafe") == 1


async def the_traces_that_matter_are_kept_whole(jaeger: Jaeger, collector: Any) -> list[dict[str, Any]]:
    """Every trace with a failure, a cancel, a ghost or a retry in Jaeger; echo's at the sampled rate. A kept
    trace holds every span the collector received for it (a span arriving after its trace's decision joins
    a kept trace: the decision cache)."""
    def kept() -> list[dict[str, Any]]:
        return jaeger.traces(SERVER, limit=100_000)

    def with_calls(traces: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
        return [trace for trace in traces if served(trace, tool)]

    await eventually(lambda: len(with_calls(kept(), "shielded_write")) == 2)
    traces = kept()
    assert len(with_calls(traces, "broken")) == FAILURES
    assert len(with_calls(traces, "hang")) == TIME_OUTS
    (ghost,) = [trace for trace in traces if any("tool.ghost_risk" in tags for tags in served(trace,
                                                                                              "shielded_write"))]
    (retry,) = [trace for trace in traces if any("tool.retried_ghost_risk" in tags
                                                 for tags in served(trace, "shielded_write"))]
    assert ghost is not retry
    # The ghost's server span came after its trace was decided (on its caller's span), and was kept with it.
    assert [tags["tool.cancel_reason"] for service, operation, tags in spans_of(ghost).values()
            if service == AGENT and operation == "tools/call shielded_write"] == ["caller"]
    kept_echoes = len(with_calls(traces, "echo"))
    bound = 6 * math.sqrt(ECHOES * SAMPLED * (1 - SAMPLED))  # six standard deviations: 2e-9 to fail by chance
    assert abs(kept_echoes - ECHOES * SAMPLED) < bound, kept_echoes
    print(f"tail sampling kept {kept_echoes} of {ECHOES} ok traces (bound {ECHOES * SAMPLED:.0f} ± {bound:.0f}), "
          f"{FAILURES} of {FAILURES} failed, {TIME_OUTS} of {TIME_OUTS} timed out, the ghost and its retry")

    received = collector.received_traces()
    for trace in traces:
        assert set(spans_of(trace)) == received[trace["traceID"]], trace["traceID"]
        calls = {service for service, operation, _ in spans_of(trace).values() if operation.startswith("tools/call")}
        assert calls in (set(), {SERVER, AGENT}), spans_of(trace)  # the client's span and the server's, in one trace
    return traces


async def every_panel_and_alert_gives_the_ground_truth(prometheus: Prometheus) -> None:
    dashboard, alerts = dashboard_queries(), alert_queries()
    (per_tool,) = dashboard["Calls by tool and outcome (since the server started)"]
    expected = {("echo", "ok"): ECHOES, ("broken", "failed"): FAILURES, ("hang", "cancelled"): TIME_OUTS,
                ("shielded_write", "cancelled"): 1, ("shielded_write", "ok"): 1, ("wait_started", "ok"): 1,
                ("release", "ok"): 1}

    def calls_per_tool() -> dict[tuple[str, ...], float]:
        by_tool = values(prometheus.query(per_tool), "gen_ai_tool_name", "tool_outcome")
        by_tool.pop(("cancel_read", "ok"), None)  # the client asking the server, as often as it took
        return by_tool

    await eventually(lambda: calls_per_tool() == expected)
    cancelled, failed = dashboard["Cancelled next to failed (calls in the last 5 minutes)"]
    assert list(prometheus.query(cancelled).values()) == [TIME_OUTS + 1]
    assert list(prometheus.query(failed).values()) == [FAILURES]
    for title in ("Ghost responses (since the server started)", "Retries of ghosts (since the server started)"):
        (query,) = dashboard[title]
        assert values(prometheus.query(query), "gen_ai_tool_name", "tool_ghost_risk") == {
            ("shielded_write", "unsafe"): 1}
    for query in dashboard["Ghosts and retries of ghosts (in the last 5 minutes)"]:
        assert values(prometheus.query(query), "tool_ghost_risk") == {("unsafe",): 1}
    for quantile in dashboard["tools/call duration by outcome, p50 and p95 (seconds)"]:
        by_outcome = values(prometheus.query(quantile), "tool_outcome")
        assert set(by_outcome) == {("ok",), ("failed",), ("cancelled",)}
        assert all(math.isfinite(value) for value in by_outcome.values())
    (from_spans,) = dashboard["Ghosts counted from spans (collector spanmetrics, any language)"]
    assert values(prometheus.query(from_spans), "service_name", "gen_ai_tool_name", "tool_ghost_risk") == {
        (SERVER, "shielded_write", "unsafe"): 1}
    (cancels_by_reason,) = dashboard["Callers' cancels by reason (client spans, in the last 5 minutes)"]
    by_reason = values(prometheus.query(cancels_by_reason), "tool_cancel_reason")
    assert by_reason == {("timeout",): TIME_OUTS, ("caller",): 1}
    (sessions,) = dashboard["Sessions by how they ended, per server (since the server started)"]
    await eventually(lambda: values(prometheus.query(sessions), "error_type") == {("",): 1})

    assert values(prometheus.query(alerts["McpUnsafeGhostResponse"]), "gen_ai_tool_name") == {("shielded_write",): 1}
    for name in ("McpGhostRetried", "McpGhostResponse"):
        assert values(prometheus.query(alerts[name]), "gen_ai_tool_name", "tool_ghost_risk") == {
            ("shielded_write", "unsafe"): 1}
    assert values(prometheus.query(alerts["McpToolFailedRatioHigh"]), "gen_ai_tool_name") == {("broken",): 1.0}
    assert prometheus.query(alerts["McpSessionEndedByError"]) == {}
    unsafe_last_hour = documented_query("Prometheus (our counter)")
    assert values(prometheus.query(unsafe_last_hour), "gen_ai_tool_name") == {("shielded_write",): 1}


async def the_ghost_warning_passes_the_logs_pipeline(sink: OtlpSink, traces: list[dict[str, Any]]) -> None:
    """The collector's logs pipeline hands the ghost's WARNING on with its trace and span ids (to `sink`,
    standing in for Loki's OTLP endpoint)."""
    def warnings() -> list[Any]:
        return [log for log in sink.logs if log.scope == "otel_mcp_cancel" and log.severity_text == "WARN"]

    await eventually(lambda: warnings() != [])
    (warning,) = warnings()
    assert is_ghost_line(warning.body)
    ghosts = [(trace["traceID"], span_id, tags) for trace in traces for span_id, (service, _, tags)
              in spans_of(trace).items() if service == SERVER and "tool.ghost_risk" in tags]
    assert [(trace_id, span_id) for trace_id, span_id, _ in ghosts] == [(warning.trace_id, warning.span_id)]
    (_, _, tags), facts = ghosts[0], ("gen_ai.tool.name", "tool.handler_outcome", "tool.ghost_risk")
    assert {fact: warning.attributes[fact] for fact in facts} == {fact: tags[fact] for fact in facts}
    assert sink.spans == [] and sink.points == []  # the collector sends it logs only


def label_sets(scrape: str) -> set[str]:
    """Every series a scrape exposes, without its value."""
    return {line.rpartition(" ")[0] for line in scrape.splitlines() if line and not line.startswith("#")}


async def hostile_reasons_add_no_series(collector: Any, environment: dict[str, str], vault: Path) -> None:
    """A peer sending 10,000 distinct, huge cancel reasons (for a call that already finished): each one's
    span is counted, and not one reason becomes a label."""
    def cancels() -> float:
        return series(collector.scrape(), "traces_span_metrics_calls_total", span_name="notifications/cancelled",
                      span_kind="SPAN_KIND_SERVER")

    before = cancels()
    command, *args = instrumented_command(vault)
    parameters = StdioServerParameters(command=command, args=args, env=environment)
    async with stdio_client(parameters) as streams, raw_peer_over(*streams) as peer:
        await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        for n in range(100):
            await peer.cancel(1, f"hostile reason {n} " + "x" * 10_000)
        await eventually(lambda: cancels() == before + 100)
        known = label_sets(collector.scrape())
        for n in range(100, HOSTILE_REASONS):
            await peer.cancel(1, f"hostile reason {n} " + "x" * 10_000)
        await eventually(lambda: cancels() == before + HOSTILE_REASONS)
        assert label_sets(collector.scrape()) == known
        assert "hostile reason" not in collector.scrape()


async def test_two_tiers_route_every_trace_whole_to_one_gateway(tmp_path: Path) -> None:
    """Two replicas of the server over streamable HTTP and three clients, each process with an agent beside
    it; the agents route by trace id to two gateways that tail-sample into one Jaeger. A ghost on one
    replica, its retry on the other."""
    vaults = [tmp_path / "replica-0", tmp_path / "replica-1"]
    for vault in vaults:
        vault.mkdir()
    with ExitStack() as stack:
        jaeger = stack.enter_context(running_jaeger(tmp_path))
        gateways = [stack.enter_context(running_collector(tmp_path, jaeger, name=f"gateway-{n}",
                                                          record_spans=True)) for n in range(2)]
        agents = [stack.enter_context(running_agent(tmp_path, f"agent-{n}", gateways)) for n in range(2)]
        replicas = []
        for n, vault in enumerate(vaults):
            replica = HttpServer(agents[n].endpoint, vault, "streamable-http", **telemetry(agents[n].endpoint, SERVER))
            stack.callback(replica.stop)
            replicas.append(f"http://127.0.0.1:{replica.port}/mcp")
        mix = [{"call": "echo", "arguments": {"text": "hi"}, "times": 40, "concurrency": 4},
               {"call": "broken", "arguments": {"text": "hi"}, "times": 5},
               {"time_out": "hang", "times": 3}]
        plans = [
            [{"url": replicas[0], "steps": [*mix, {"ghost": "g.md", "vault": str(vaults[0])}]},
             {"url": replicas[1], "steps": [{"call": "release"},
                                            {"call": "shielded_write", "arguments": {"name": "g.md"}}]}],
            [{"url": replicas[1], "steps": mix}],
            [{"url": replicas[0], "steps": mix}],
        ]
        async with anyio.create_task_group() as clients:
            for n, plan in enumerate(plans):
                clients.start_soon(run_client, plan, agents[n % 2].endpoint)

        def cancelled() -> list[dict[str, Any]]:
            return jaeger.traces(SERVER, {"tool.outcome": "cancelled"})

        await eventually(lambda: len(cancelled()) == len(plans) * 3 + 1)  # every time-out, and the ghost
        (ghost,) = jaeger.traces(SERVER, {"tool.ghost_risk": "unsafe"})
        (fingerprint,) = {tags["tool.call_fingerprint"] for tags in served(ghost, "shielded_write")}
        # The ghost's trace and its retry's, on the other replica: each reaches Jaeger on its own (a trace waits
        # out the gateway's sampling decision), so the retry's may still be on its way.
        await eventually(lambda: len(jaeger.traces(SERVER, {"tool.call_fingerprint": fingerprint})) == 2)

        def served_calls(tool: str, outcome: str) -> float:
            return sum(series(gateway.scrape(), "traces_span_metrics_calls_total", span_kind="SPAN_KIND_SERVER",
                              span_name=f"tools/call {tool}", tool_outcome=outcome) for gateway in gateways)

        # Every span measured, in one gateway or the other.
        await eventually(lambda: served_calls("echo", "ok") == len(plans) * 40)
        assert (served_calls("broken", "failed"), served_calls("hang", "cancelled")) == (len(plans) * 5,
                                                                                         len(plans) * 3)

        def whole_in_one_gateway() -> bool:
            received = [gateway.received_traces() for gateway in gateways]
            for trace in jaeger.traces(SERVER, limit=10_000):
                holders = [spans for spans in received if trace["traceID"] in spans]
                if len(holders) != 1 or holders[0][trace["traceID"]] != set(spans_of(trace)):
                    return False
            return all(received) and not set(received[0]) & set(received[1])

        await eventually(whole_in_one_gateway)
        kept = jaeger.traces(SERVER, limit=10_000)
        counted = Counter(operation for trace in kept for service, operation, tags in spans_of(trace).values()
                          if service == SERVER and tags["span.kind"] == "server")
        assert (counted["tools/call broken"], counted["tools/call hang"]) == (len(plans) * 5, len(plans) * 3)
