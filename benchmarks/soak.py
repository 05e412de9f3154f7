"""Memory over many sessions: N sequential sessions of the SDK's own client and server over memory streams, one
tools/call each (every third one given up on mid-call by its caller; every answered one is what a server
remembers for a cancel that may cross it), then a full collection; the peak resident memory and what is still
alive, with the plugin and without it, each in a fresh process on the installed mcp line. A server that forgets
everything of a closed session stays flat.

    python benchmarks/soak.py [--sessions 10000]

`plain`: no plugin, the SDK's providers as production runs them (batch span processor, periodic metric reader,
OTLP/HTTP to a receiver that drops everything); `floor`: the same, and the OpenTelemetry SDK's own calls for
what the plugin records per call (a CLIENT and a SERVER span on mcp 1.x, which makes none itself, as mcp 2.x
does; a point in each duration histogram): what holding that telemetry costs, whoever makes it; `plugin`: plain,
instrumented. Prints each mode's peak RSS (MiB), the sessions and request records still alive after
`gc.collect()`, and the ratios plugin / plain and plugin / floor.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class Drop(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def session_types() -> tuple[type, ...]:
    try:
        from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher as Session
    except ImportError:  # mcp 1.x
        from mcp.server.session import ServerSession as Session
    return (Session,)


async def sessions(count: int, floor: bool = False) -> None:
    import anyio
    from mcp.shared.memory import create_client_server_memory_streams

    try:
        from mcp.server.mcpserver import MCPServer as Server
    except ImportError:  # mcp 1.x
        from mcp.server.fastmcp import FastMCP as Server
    from mcp import ClientSession

    server = Server("soak")
    lowlevel = getattr(server, "_lowlevel_server", None) or server._mcp_server
    release = anyio.Event()
    telemetry = Floor() if floor else None

    @server.tool()
    async def work(text: str) -> str:
        with telemetry.span("SERVER") if telemetry is not None else nullcontext():
            if text == "hold":
                await release.wait()
            return text

    for n in range(count):
        async with create_client_server_memory_streams() as ((c_read, c_write), (s_read, s_write)):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lowlevel.run, s_read, s_write, lowlevel.create_initialization_options())
                async with ClientSession(c_read, c_write) as client:
                    await client.initialize()
                    with telemetry.span("CLIENT") if telemetry is not None else nullcontext():
                        if n % 3 == 0:
                            with anyio.move_on_after(0.001):
                                await client.call_tool("work", {"text": "hold"})
                        else:
                            await client.call_tool("work", {"text": f"call {n}"})
                tg.cancel_scope.cancel()


class Floor:
    """The SDK's own calls for one side's span (on mcp 1.x) and duration point, as an instrumentation makes them."""

    def __init__(self) -> None:
        from importlib.metadata import version

        from opentelemetry import metrics, trace

        self._tracer = trace.get_tracer("floor") if version("mcp").startswith("1.") else None
        meter = metrics.get_meter("floor")
        self._durations = {side: meter.create_histogram(f"mcp.{side.lower()}.operation.duration", unit="s")
                           for side in ("CLIENT", "SERVER")}

    @contextmanager
    def span(self, side: str) -> Iterator[None]:
        from opentelemetry.trace import SpanKind

        attributes = {"mcp.method.name": "tools/call", "gen_ai.tool.name": "work", "tool.outcome": "ok"}
        opened = (self._tracer.start_as_current_span("tools/call work", kind=SpanKind[side], attributes=attributes)
                  if self._tracer is not None else nullcontext())
        with opened:
            try:
                yield
            finally:
                self._durations[side].record(0.001, attributes)


def child(mode: str, count: int, endpoint: str) -> None:
    import anyio
    from opentelemetry import metrics, trace
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(f"{endpoint}/v1/traces")))
    trace.set_tracer_provider(tracer_provider)
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(f"{endpoint}/v1/metrics"), 1000)
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    if mode == "plugin":
        from otel_mcp_cancel import McpCancelInstrumentor

        McpCancelInstrumentor().instrument()
    anyio.run(sessions, count, mode == "floor")
    tracer_provider.force_flush()
    gc.collect()
    from otel_mcp_cancel.request_state import RequestRecord

    alive = sum(1 for found in gc.get_objects() if isinstance(found, (*session_types(), RequestRecord)))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_mib": peak, "alive": alive}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child(options.child, options.sessions, options.endpoint)
        return
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Drop)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}"
    results = {}
    for mode in ("plain", "floor", "plugin"):
        done = subprocess.run([sys.executable, __file__, "--child", mode, "--sessions", str(options.sessions),
                               "--endpoint", endpoint], capture_output=True, text=True, check=True)
        results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{mode:>6}: peak RSS {results[mode]['peak_mib']:.1f} MiB, sessions and records alive after "
              f"gc.collect(): {results[mode]['alive']}")
    receiver.shutdown()
    from importlib.metadata import version

    peak = {mode: found["peak_mib"] for mode, found in results.items()}
    print(f"mcp {version('mcp')}, {options.sessions} sessions: peak RSS plugin / plain "
          f"{peak['plugin'] / peak['plain']:.3f}, plugin / floor {peak['plugin'] / peak['floor']:.3f}")


if __name__ == "__main__":
    main()
