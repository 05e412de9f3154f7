"""Drive the notes vault through every outcome, then print what the telemetry says happened.

    python examples/traffic.py [--seconds N]

The server runs unchanged under `opentelemetry-instrument` over stdio; this script's own MCP client is
instrumented too, so each call is one trace with both ends. With no OTEL_EXPORTER_OTLP_ENDPOINT set, both
export to a receiver embedded here and the tables below are built from the spans, metrics and log
records that receiver got. With it set, telemetry goes to your endpoint instead, and every OTEL_* variable
you set (headers, OTEL_METRICS_EXPORTER=none for a trace-only backend, resource attributes, this
plugin's OTEL_PYTHON_MCP_CANCEL_* options) reaches the server as it would any `opentelemetry-instrument`
process. The client exports OTLP/HTTP.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_mcp_cancel import McpCancelInstrumentor
from otel_mcp_cancel.conventions import GHOST_LOG_PREFIX

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from examples.otlp_sink import OtlpSink, ReceivedSpan, exporter_environment  # noqa: E402

SERVER = Path(__file__).with_name("notes_server.py")
SCOPE = "otel_mcp_cancel"
OUTCOMES = ("ok", "failed", "cancelled")
# What the trace view shows of a span: what an operator filters on.
SHOWN = ("tool.outcome", "tool.cancel_reason", "error.type", "tool.handler_outcome", "tool.ghost_risk",
         "tool.retried_ghost_risk")


def server_environment(endpoint: str) -> dict[str, str]:
    """The server's environment: OTLP/HTTP to `endpoint`, then every OTEL_* variable of yours on top, as
    `opentelemetry-instrument` would read them."""
    defaults = exporter_environment(endpoint)
    # The ghost WARNING as an OTLP log record, tied to its span (OTEL_LOGS_EXPORTER=none turns it off).
    defaults.update({
        "OTEL_LOGS_EXPORTER": "otlp_proto_http",
        "OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED": "true",
        "OTEL_BLRP_SCHEDULE_DELAY": "200",
    })
    return {**defaults, **{name: value for name, value in os.environ.items() if name.startswith("OTEL_")}}


def trace_the_client(sink: OtlpSink | None) -> tuple[TracerProvider, MeterProvider]:
    """Instrument this script's MCP client, exporting where the server does."""
    endpoint = (lambda signal: f"{sink.endpoint}/v1/{signal}") if sink is not None else (lambda signal: None)
    service = f"{os.environ.get('OTEL_SERVICE_NAME', 'notes-mcp-server')}-client"
    resource = Resource.create({SERVICE_NAME: service})
    tracer_provider, readers = TracerProvider(resource=resource), []
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp") != "none":
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint("traces"))))
    if os.environ.get("OTEL_METRICS_EXPORTER", "otlp") != "none":
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint("metrics"))))
    meter_provider = MeterProvider(metric_readers=readers, resource=resource)
    McpCancelInstrumentor().instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    return tracer_provider, meter_provider


async def quietly(call) -> None:
    """A call that is expected to fail or time out; the telemetry, not this script, records what happened."""
    try:
        await call
    except Exception:
        pass


async def one_round(client: Client, round_number: int) -> list[str]:
    """Every outcome once, two ghosts and a retry of one; returns the notes whose writes were ghosts."""
    ghost_note = {"name": f"ghost-{round_number}.md", "text": "committed", "commit_seconds": 0.5}
    await client.call_tool("write_note", {"name": f"note-{round_number}.md", "text": "ok"})  # ok
    await client.call_tool("read_note", {"name": f"note-{round_number}.md"})  # ok
    await client.call_tool("search_notes", {"query": "ok"})  # ok
    await client.call_tool("lint_note", {"name": f"note-{round_number}.md"})  # failed: the tool returned isError
    await client.call_tool("read_note", {"name": "missing.md"})  # failed: the tool raised
    await client.call_tool("export_vault", {"destination": "/"})  # failed
    await client.call_tool("delete_everything", {})  # failed: no such tool
    # cancelled by timeout: the search is interrupted, nothing was done
    await quietly(client.call_tool("search_notes", {"query": "x", "seconds": 5}, read_timeout_seconds=0.2))
    # cancelled by the caller
    with anyio.move_on_after(0.2):
        await client.call_tool("search_notes", {"query": "y", "seconds": 5})
    # ghosts: the caller times out, the write commits anyway, its answer is suppressed
    await quietly(client.call_tool("write_note", ghost_note, read_timeout_seconds=0.1))
    await quietly(client.call_tool("append_journal", {"line": f"round {round_number}", "seconds": 0.5},
                                   read_timeout_seconds=0.1))
    await anyio.sleep(0.6)  # let the ghosts' commits finish
    # the caller, having seen a timeout, tries the write again: a retry of a ghost
    await client.call_tool("write_note", ghost_note)
    return [ghost_note["name"]]


def outcome_table(calls: list[ReceivedSpan]) -> list[str]:
    by_outcome = Counter((s.attributes.get("gen_ai.tool.name", "?"), s.attributes["tool.outcome"]) for s in calls)
    lines = [f"  {'tool':<20} {'ok':>4} {'failed':>7} {'cancelled':>10}"]
    for tool in sorted({tool for tool, _ in by_outcome}):
        counts = [by_outcome[(tool, outcome)] for outcome in OUTCOMES]
        lines.append(f"  {tool:<20} {counts[0]:>4} {counts[1]:>7} {counts[2]:>10}")
    return lines


def drawn(span: ReceivedSpan, depth: int) -> str:
    """One span as a line of a trace view: kind, name, outcome and what an operator filters on."""
    shown = [f"{key}={span.attributes[key]}" for key in SHOWN if key in span.attributes]
    if span.links:
        shown.append(f"linked to span {span.links[0]}")
    return f"  {'  ' * depth}{'└─ ' if depth else ''}{span.kind} {span.name}: {', '.join(shown)}"


def a_ghost_and_its_retry(sink: OtlpSink, ghosts: list[ReceivedSpan], retries: list[ReceivedSpan]) -> list[str]:
    """The first retried ghost's trace and its retry's, each client span with its server span beneath."""
    retried = {link for retry in retries for link in retry.links}
    ghost = next((s for s in ghosts if s.span_id in retried), None)
    if ghost is None:
        return ["  (no ghost was retried in this run)"]
    retry = next(s for s in retries if ghost.span_id in s.links)
    by_id = {s.span_id: s for s in sink.spans}
    lines = []
    for server in (ghost, retry):
        client = by_id.get(server.parent_span_id)
        if client is not None:
            lines.append(drawn(client, 0))
        lines.append(drawn(server, 1) + (f" (span {server.span_id})" if server is ghost else ""))
    return lines


def print_summary(sink: OtlpSink, rounds: int, vault: Path, ghost_notes: list[str]) -> None:
    calls = [s for s in sink.server_spans(SCOPE) if s.attributes.get("mcp.method.name") == "tools/call"]
    ghosts = [s for s in calls if "tool.ghost_risk" in s.attributes]
    retries = [s for s in calls if "tool.retried_ghost_risk" in s.attributes]
    client_spans = {s.span_id for s in sink.spans if s.kind == "CLIENT" and s.scope == SCOPE}
    ghost_ids = {(s.trace_id, s.span_id) for s in ghosts}
    warnings = [log for log in sink.logs if log.severity_text == "WARN"]
    tied = sum((log.trace_id, log.span_id) in ghost_ids for log in warnings)
    greppable = sum(log.body.startswith(GHOST_LOG_PREFIX) for log in warnings)
    counted = sum(p.value for p in sink.latest_points("tool.ghost_responses"))
    retries_counted = sum(p.value for p in sink.latest_points("tool.ghost_retries"))
    by_risk = Counter(s.attributes["tool.ghost_risk"] for s in ghosts)
    on_disk = sum((vault / name).exists() for name in ghost_notes)

    print(f"\n{rounds} round(s) of traffic; what the server and this client exported:")
    print("\ntools/call by tool and outcome (server spans)")
    print("\n".join(outcome_table(calls)))
    print(f"\nghosts (the handler finished, its answer was suppressed): {len(ghosts)}, by risk: "
          + ", ".join(f"{risk} {n}" for risk, n in sorted(by_risk.items())))
    print(f"  tool.ghost_responses counter: {counted:.0f}; WARNING log records tied to a ghost span: "
          f"{tied} of {len(warnings)}, starting {GHOST_LOG_PREFIX}: {greppable}")
    print(f"  ghost writes on disk all the same: {on_disk} of {len(ghost_notes)} notes")
    print(f"retries of a ghost (same session, tool and arguments): {len(retries)}, "
          f"tool.ghost_retries counter: {retries_counted:.0f}")
    joined = sum(s.parent_span_id in client_spans for s in calls)
    print(f"one trace per call: {joined} of {len(calls)} server spans are children of this client's spans")
    print("\na ghost and its retry, as a trace view shows them")
    print("\n".join(a_ghost_and_its_retry(sink, ghosts, retries)))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=0, help="keep sending rounds of traffic this long")
    options = parser.parse_args()

    own_endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    sink = None if own_endpoint else OtlpSink().start()
    environment = server_environment(own_endpoint or sink.endpoint)
    tracer_provider, meter_provider = trace_the_client(sink)
    with tempfile.TemporaryDirectory(prefix="notes-demo-") as workdir:  # the vault goes with it
        vault, server_log = Path(workdir) / "vault", Path(workdir) / "server.log"
        server = StdioServerParameters(
            command=str(Path(sys.executable).with_name("opentelemetry-instrument")),
            args=[sys.executable, str(SERVER), str(vault)],
            env=environment,
        )
        ghost_notes: list[str] = []
        deadline = time.monotonic() + options.seconds
        try:
            with server_log.open("w") as errlog, anyio.fail_after(options.seconds + 120):
                async with Client(stdio_client(server, errlog=errlog)) as client:
                    rounds = 0
                    while rounds == 0 or time.monotonic() < deadline:
                        rounds += 1
                        ghost_notes += await one_round(client, rounds)
        except BaseException:
            print(f"the server's log:\n{server_log.read_text()[-3000:]}", file=sys.stderr)
            raise
        tracer_provider.shutdown()  # flush the client's spans and metrics
        meter_provider.shutdown()
        if sink is None:
            print(f"{rounds} round(s) of traffic sent; telemetry was exported to {own_endpoint}")
            return
        await exported(sink)
        print_summary(sink, rounds, vault, ghost_notes)
    sink.stop()


async def exported(sink: OtlpSink) -> None:
    """Wait (bounded) until the server's ghost counter and WARNING records have caught up with its spans: each
    is exported on its own schedule."""
    def caught_up() -> bool:
        ghosts = [s for s in sink.server_spans(SCOPE) if "tool.ghost_risk" in s.attributes]
        counted = sum(p.value for p in sink.latest_points("tool.ghost_responses"))
        warnings = [log for log in sink.logs if log.severity_text == "WARN"]
        return bool(ghosts) and counted == len(ghosts) == len(warnings)

    with anyio.move_on_after(15):
        while not caught_up():
            await anyio.sleep(0.1)


if __name__ == "__main__":
    anyio.run(main)
