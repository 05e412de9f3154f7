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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from examples.otlp_sink import OtlpSink, exporter_environment  # noqa: E402

SERVER = Path(__file__).with_name("notes_server.py")
SCOPE = "otel_mcp_cancel"


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
    """Every outcome once; returns the notes whose writes were cancelled by the caller's timeout."""
    ghost_note = f"ghost-{round_number}.md"
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
    await quietly(
        client.call_tool("write_note", {"name": ghost_note, "text": "committed", "commit_seconds": 0.5},
                         read_timeout_seconds=0.1)
    )
    await quietly(client.call_tool("append_journal", {"line": f"round {round_number}", "seconds": 0.5},
                                   read_timeout_seconds=0.1))
    await anyio.sleep(0.6)  # let the ghosts' commits finish before the next round
    return [ghost_note]


def print_tables(sink: OtlpSink, vault: Path, ghost_notes: list[str]) -> None:
    calls = [s for s in sink.server_spans(SCOPE) if s.attributes.get("mcp.method.name") == "tools/call"]
    by_outcome = Counter((s.attributes.get("gen_ai.tool.name", "?"), s.attributes["tool.outcome"]) for s in calls)
    print("\ntools/call by tool and outcome (from the server's spans)")
    print(f"  {'tool':<20} {'ok':>4} {'failed':>7} {'cancelled':>10}")
    for tool in sorted({tool for tool, _ in by_outcome}):
        counts = [by_outcome[(tool, outcome)] for outcome in ("ok", "failed", "cancelled")]
        print(f"  {tool:<20} {counts[0]:>4} {counts[1]:>7} {counts[2]:>10}")

    ghosts = [s for s in calls if any(name == "mcp.ghost_response.suppressed" for name, _ in s.events)]
    print("\nghost responses (handler finished, answer suppressed after the caller cancelled)")
    for span in ghosts:
        events = dict(span.events)
        reason = events["mcp.request.cancelled"].get("mcp.cancel.reason", "")
        risk = events["mcp.ghost_response.suppressed"]["tool.ghost_risk"]
        print(f"  {span.attributes['gen_ai.tool.name']:<20} request {span.attributes['jsonrpc.request.id']:<4}"
              f" risk {risk:<11} caller said: {reason}")
    counted = sum(p.value for p in sink.latest_points("mcp.server.ghost_responses"))
    print(f"  mcp.server.ghost_responses counter: {counted:.0f}")

    print("\nthe vault after the run: the ghosts' writes did happen")
    for name in ghost_notes:
        print(f"  {name:<20} {'on disk' if (vault / name).exists() else 'MISSING'}")
    journal = vault / "journal.md"
    print(f"  journal.md           {len(journal.read_text().splitlines()) if journal.exists() else 0} lines")

    client_spans = {s.span_id for s in sink.spans if s.kind == "CLIENT" and s.scope == SCOPE}
    joined = sum(s.parent_span_id in client_spans for s in calls)
    print(f"\none trace per call: {joined} of {len(calls)} server spans are children of this script's client spans")

    print("\nthe ghost WARNING as OTLP log records, each tied to its ghost's span")
    ghost_spans = {(s.trace_id, s.span_id): s for s in ghosts}
    for log in sink.logs:
        if log.severity_text == "WARN":
            span = ghost_spans.get((log.trace_id, log.span_id))
            tool, risk = log.attributes.get("gen_ai.tool.name", "?"), log.attributes.get("tool.ghost_risk")
            print(f"  {tool:<20} risk {risk!s:<11} span {log.span_id} "
                  f"{'= the ghost span' if span is not None else 'NOT a ghost span'}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=0, help="keep sending rounds of traffic this long")
    options = parser.parse_args()

    own_endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    sink = None if own_endpoint else OtlpSink().start()
    environment = server_environment(own_endpoint or sink.endpoint)
    tracer_provider, meter_provider = trace_the_client(sink)
    workdir = Path(tempfile.mkdtemp(prefix="notes-demo-"))
    vault, server_log = workdir / "vault", workdir / "server.log"
    server = StdioServerParameters(
        command=str(Path(sys.executable).with_name("opentelemetry-instrument")),
        args=[sys.executable, str(SERVER), str(vault)],
        env=environment,
    )
    ghost_notes: list[str] = []
    deadline = time.monotonic() + options.seconds
    with server_log.open("w") as errlog, anyio.fail_after(options.seconds + 120):
        async with Client(stdio_client(server, errlog=errlog), mode="legacy") as client:
            round_number = 0
            while round_number == 0 or time.monotonic() < deadline:
                round_number += 1
                ghost_notes += await one_round(client, round_number)
    tracer_provider.shutdown()  # flush the client's spans and metrics
    meter_provider.shutdown()
    print(f"{round_number} round(s) of traffic sent; vault at {vault}, server log at {server_log}")
    if sink is None:
        print(f"telemetry was exported to {own_endpoint}")
        return
    with anyio.fail_after(15):
        while not any(p.value for p in sink.latest_points("mcp.server.ghost_responses")):
            await anyio.sleep(0.1)
    with anyio.move_on_after(5):  # the log records are exported on their own schedule
        while not any(log.severity_text == "WARN" for log in sink.logs):
            await anyio.sleep(0.1)
    print_tables(sink, vault, ghost_notes)
    sink.stop()


if __name__ == "__main__":
    anyio.run(main)
