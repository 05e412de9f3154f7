"""The plugin's own CPU per tools/call, against the floor: what the OpenTelemetry SDK itself charges for the
same telemetry (2 spans and 2 histogram records, with the same attributes).

    python benchmarks/hot_path.py [--calls 2000] [--rounds 3]       # on the installed mcp line
    python benchmarks/hot_path.py --profile plugin                    # cProfile of one run, top 30
    python benchmarks/hot_path.py --before /tmp/old/src               # also another checkout's plugin, interleaved

Client and server run in one process over memory streams: the full JSON-RPC path, no IPC noise. Each
measurement is a fresh process (instrumentation is process-wide); rounds interleave the modes so drift
hits all alike, and each figure is the median over rounds:
- `none`: no providers, no plugin;
- `plugin`: the plugin on both ends, with SDK providers as production runs them (batch span processor,
  periodic metric reader, OTLP/HTTP to a receiver in the parent process);
- `floor`: the same providers, no plugin; the SDK's own calls for what the plugin records per call:
  a SERVER and a CLIENT span with the attributes ours carry, their outcome, and one record in each
  duration histogram in its span's context (so with the exemplar ours carry), timed alone;
- `sdk` (mcp 2.x): the same providers as the global ones, no plugin: mcp's own spans, for comparison.
Where there are providers, exporting what the calls queued (a flush) is inside the timing.
`plugin adds` = plugin − none per call (on mcp 2.x it includes standing in for the SDK's own spans);
the ratio to report is plugin adds / floor.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.metadata
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from examples.otlp_sink import OtlpSink  # noqa: E402

MODES = ("none", "plugin", "floor", "sdk")
WARM_UP = 200
MCP_MAJOR = int(importlib.metadata.version("mcp").split(".")[0])


def providers(endpoint: str) -> tuple[Any, Any]:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics"))
    return tracer_provider, MeterProvider(metric_readers=[reader])


def flusher(tracer_provider: Any, meter_provider: Any) -> Any:
    """Export what is queued now: the batch processor's and the reader's CPU belong to the calls measured."""
    def flush() -> None:
        tracer_provider.force_flush()
        meter_provider.force_flush()

    return flush


def floor_per_call(tracer_provider: Any, meter_provider: Any, calls: int) -> float:
    """Seconds per call for the SDK's own work: 2 spans and 2 histogram records, our attributes."""
    from opentelemetry.trace import SpanKind, set_span_in_context

    tracer = tracer_provider.get_tracer("floor")
    meter = meter_provider.get_meter("floor")
    server_duration = meter.create_histogram("mcp.server.operation.duration", unit="s")
    client_duration = meter.create_histogram("mcp.client.operation.duration", unit="s")
    started = time.perf_counter()
    for n in range(calls):
        request = {
            "mcp.method.name": "tools/call",
            "jsonrpc.request.id": str(n),
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "echo",
        }
        outcome = {"tool.outcome": "ok"}
        metric = {"mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool",
                  "gen_ai.tool.name": "echo", "mcp.protocol.version": "2025-06-18", "tool.outcome": "ok"}
        client = tracer.start_span("tools/call echo", kind=SpanKind.CLIENT, attributes=request)
        server = tracer.start_span("tools/call echo", kind=SpanKind.SERVER, attributes=request)
        server.set_attributes({"mcp.protocol.version": "2025-06-18", **outcome})
        server_duration.record(0.001, metric, context=set_span_in_context(server))  # with its exemplar, as ours
        server.end()
        client.set_attributes(outcome)
        client_duration.record(0.001, metric, context=set_span_in_context(client))
        client.end()
    flusher(tracer_provider, meter_provider)()
    return (time.perf_counter() - started) / calls


async def traffic(calls: int, flush: Any = None) -> float:
    """Seconds per tools/call, the SDK's own client and server over memory streams; `flush()`, if given,
    runs inside the timing (what the calls left to export is part of their cost)."""
    import anyio
    from mcp.shared.memory import create_client_server_memory_streams

    try:
        from mcp.server.mcpserver import MCPServer as Server
    except ImportError:  # mcp 1.x
        from mcp.server.fastmcp import FastMCP as Server
    server = Server("hot-path")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    lowlevel = getattr(server, "_lowlevel_server", None) or server._mcp_server
    async with create_client_server_memory_streams() as ((client_read, client_write), (server_read, server_write)):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: lowlevel.run(server_read, server_write, lowlevel.create_initialization_options()))
            if MCP_MAJOR == 2:
                from contextlib import asynccontextmanager

                from mcp import Client

                @asynccontextmanager
                async def streams() -> Any:
                    yield client_read, client_write

                async with Client(streams(), mode="legacy") as session:
                    seconds = await timed(session, calls, flush)
            else:
                from mcp import ClientSession

                async with ClientSession(client_read, client_write) as session:
                    await session.initialize()
                    seconds = await timed(session, calls, flush)
            tg.cancel_scope.cancel()
    return seconds


async def timed(session: Any, calls: int, flush: Any) -> float:
    for _ in range(WARM_UP):
        await session.call_tool("echo", {"text": "warm"})
    if flush is not None:
        flush()
    started = time.perf_counter()
    for _ in range(calls):
        await session.call_tool("echo", {"text": "hello"})
    if flush is not None:
        flush()
    return (time.perf_counter() - started) / calls


def child(mode: str, calls: int, endpoint: str, profile: bool) -> dict[str, float]:
    import anyio

    if mode == "none":
        return {"per_call": anyio.run(traffic, calls)}
    tracer_provider, meter_provider = providers(endpoint)
    flush = flusher(tracer_provider, meter_provider)
    if mode == "floor":
        floor_per_call(tracer_provider, meter_provider, WARM_UP)
        return {"per_call": floor_per_call(tracer_provider, meter_provider, calls)}
    if mode == "sdk":  # mcp 2.x's own spans, through the global provider
        from opentelemetry import trace

        trace.set_tracer_provider(tracer_provider)
        return {"per_call": anyio.run(traffic, calls, flush)}
    from otel_mcp_cancel import McpCancelInstrumentor

    McpCancelInstrumentor().instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    if not profile:
        return {"per_call": anyio.run(traffic, calls, flush)}
    profiler = cProfile.Profile()
    profiler.enable()
    per_call = anyio.run(traffic, calls, flush)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats("otel_mcp_cancel|opentelemetry", 30)
    print(out.getvalue(), file=sys.stderr)
    return {"per_call": per_call}


def run_child(mode: str, calls: int, endpoint: str, profile: bool = False, source: str | None = None) -> float:
    """One measurement in a fresh process; `source`: import the plugin from that checkout's src/ instead."""
    command = [sys.executable, __file__, "--child", mode, str(calls), endpoint] + (["--profile"] if profile else [])
    environment = {**os.environ, "PYTHONPATH": source} if source else None
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, env=environment)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    if profile:
        print(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])["per_call"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", choices=MODES, help="profile one run of this mode instead of measuring")
    parser.add_argument("--smoke", action="store_true", help="a few calls each, to check that it works")
    parser.add_argument("--before", help="src/ of another checkout: its plugin is measured too, interleaved")
    options = parser.parse_args()
    calls, rounds = (50, 1) if options.smoke else (options.calls, options.rounds)
    sink = OtlpSink(keep=False).start()
    try:
        if options.profile:
            run_child(options.profile, calls, sink.endpoint, profile=True)
            return
        modes = list(MODES if MCP_MAJOR == 2 else MODES[:3]) + (["before"] if options.before else [])
        measured: dict[str, list[float]] = {mode: [] for mode in modes}
        for _ in range(rounds):
            for mode in modes:
                if mode == "before":
                    measured[mode].append(run_child("plugin", calls, sink.endpoint, source=options.before))
                else:
                    measured[mode].append(run_child(mode, calls, sink.endpoint))
    finally:
        sink.stop()
    us = {mode: 1e6 * statistics.median(values) for mode, values in measured.items()}
    added = us["plugin"] - us["none"]
    print(f"mcp {importlib.metadata.version('mcp')}, {calls} calls x {rounds} rounds, in-process over memory streams")
    print("| mcp | no telemetry µs/call | plugin µs/call | plugin adds µs | floor µs (2 spans + 2 records) "
          "| adds / floor | mcp's own spans add µs |")
    print("|---|---|---|---|---|---|---|")
    own = f"{us['sdk'] - us['none']:.0f}" if "sdk" in us else "–"
    version = importlib.metadata.version("mcp")
    print(f"| {version} | {us['none']:.0f} | {us['plugin']:.0f} | {added:.0f} | "
          f"{us['floor']:.0f} | {added / us['floor']:.2f} | {own} |")
    if "before" in us:
        before = us["before"] - us["none"]
        print(f"| {version}, plugin from {options.before} | {us['none']:.0f} | {us['before']:.0f} | {before:.0f} | "
              f"{us['floor']:.0f} | {before / us['floor']:.2f} | {own} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        mode, calls, endpoint = sys.argv[2], int(sys.argv[3]), sys.argv[4]
        print(json.dumps(child(mode, calls, endpoint, "--profile" in sys.argv)))
    else:
        main()
