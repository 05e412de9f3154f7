"""How many of the calls whose caller gave up as the server answered are reported as ghosts, on the 2026-07-28
revision (the mcp 2.x client's default: one POST per request, a give-up closes it) and on a legacy session.

    python benchmarks/crossings.py                      # server and client instrumented
    python benchmarks/crossings.py --server-only        # the client uninstrumented (a desktop host's)
    python benchmarks/crossings.py --json               # the server answers in JSON, not SSE
    python benchmarks/crossings.py --smoke              # a few calls: checks it runs, measures nothing

One call at a time, from this process, to `crossing_server.py` under uvicorn and `opentelemetry-instrument`: each
call's tool waits `--delay` and then writes a row; the caller's timeout is swept across the moment of the answer.
Ground truth is outside the plugin: what the caller saw (a result, or its timeout) and the rows the handler wrote.
A crossing is a call whose caller was told it timed out while its row was written. For each, the report says
whether the server's span, the client's, or neither carried a ghost; a ghost on a call that is not a crossing is
false. Figures are counts, not times: the sweep's steps only spread the give-up around the answer.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from examples.otlp_sink import OtlpSink, exporter_environment  # noqa: E402
from tests.subprocess_servers import free_port, instrumented_script, stop_process, wait_for_port  # noqa: E402

SCOPE = "otel_mcp_cancel"


def client_tracing() -> Any:
    """The plugin on this process's client, its spans kept in memory."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_mcp_cancel import McpCancelInstrumentor

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    McpCancelInstrumentor().instrument(tracer_provider=provider, meter_provider=MeterProvider())
    return exporter


async def sweep(url: str, mode: str, delay: float, steps: list[float]) -> list[tuple[str, bool]]:
    """One call a step, its caller's timeout `step` seconds past the handler's `delay`: each call's key, and
    whether its caller timed out."""
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    seen = []
    async with Client(url, mode=mode) as client:
        for index, step in enumerate(steps):
            key = f"{mode}-{index}"
            try:
                await client.call_tool("write", {"key": key, "delay": delay}, read_timeout_seconds=delay + step)
                seen.append((key, False))
            except MCPError:
                seen.append((key, True))
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server-only", action="store_true")
    parser.add_argument("--json", action="store_true", help="the server answers in JSON, not SSE")
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    options = parser.parse_args()
    exporter = None if options.server_only else client_tracing()
    # The give-up from 2 ms before the handler's end to 8 ms after, in 0.25 ms steps.
    steps = [i / 4000 for i in range(-8, 32)] * (1 if options.smoke else options.rounds)
    if options.smoke:
        steps = steps[::8]
    sink = OtlpSink().start()
    rows = Path(tempfile.mkdtemp(prefix="crossings-")) / "rows"
    rows.touch()
    port = free_port()
    server = subprocess.Popen(
        instrumented_script(HERE / "crossing_server.py", str(rows), str(port), *(["json"] if options.json else [])),
        env={**os.environ, **exporter_environment(sink.endpoint)}, stdout=subprocess.DEVNULL,
    )
    failures = 0
    try:
        wait_for_port(port, server)
        for mode in ("2026-07-28", "legacy"):
            seen = anyio.run(sweep, f"http://127.0.0.1:{port}/mcp", "auto" if mode != "legacy" else "legacy",
                             options.delay, steps)
            failures += report(mode, seen, rows, sink, exporter)
    finally:
        stop_process(server, 2)
        sink.stop()
    return 1 if failures else 0


def report(mode: str, seen: list[tuple[str, bool]], rows: Path, sink: OtlpSink, exporter: Any) -> int:
    """Print the crossings and who reported each; returns the false ghosts' count."""
    written = dict(line.split() for line in rows.read_text().splitlines())
    ids = {written[key]: key for key, _ in seen if key in written}
    deadline = time.monotonic() + 10  # its batch processor sends every 200 ms
    while time.monotonic() < deadline and not set(ids) <= {
            str(span.attributes.get("jsonrpc.request.id")) for span in list(sink.spans) if span.kind == "SERVER"}:
        time.sleep(0.1)
    time.sleep(0.5)  # and a ghost found after its call's span, in the next batch
    served, server_ghosts = {}, set()
    for span in list(sink.spans):
        request_id = str(span.attributes.get("jsonrpc.request.id"))
        if span.scope != SCOPE or request_id not in ids:
            continue
        if span.kind == "SERVER" and span.name == "tools/call write":
            served[ids[request_id]] = span
        if "tool.ghost_kind" in span.attributes:
            server_ghosts.add(ids[request_id])
    client_ghosts = set()
    if exporter is not None:
        for span in exporter.get_finished_spans():
            attributes = span.attributes or {}
            if "tool.ghost_kind" in attributes and str(attributes.get("jsonrpc.request.id")) in ids:
                client_ghosts.add(ids[str(attributes["jsonrpc.request.id"])])
    crossings = [key for key, timed_out in seen if timed_out and key in written]
    found = [key for key in crossings if key in server_ghosts or key in client_ghosts]
    false = (server_ghosts | client_ghosts) - set(crossings)
    outcomes: dict[str, int] = {}
    for key in crossings:
        outcome = served[key].attributes.get("tool.outcome") if key in served else "no span"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    print(f"{mode}: {len(seen)} calls, {sum(t for _, t in seen)} timed out, {len(crossings)} crossings; "
          f"reported {len(found)} ({sum(key in server_ghosts for key in crossings)} by the server, "
          f"{sum(key in client_ghosts for key in crossings)} by the client); false ghosts {len(false)}; "
          f"server outcomes of the crossings {outcomes}")
    rows.write_text("")
    sink.spans.clear()
    if exporter is not None:
        exporter.clear()
    return len(false)


if __name__ == "__main__":
    sys.exit(main())
