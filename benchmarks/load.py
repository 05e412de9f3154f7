"""What a server under load pays for its telemetry: server CPU per call, throughput, p50 and p99, per mode.

    python benchmarks/load.py                               # this mcp (2.x), 2,000 calls a run, 3 rounds
    python benchmarks/load.py --mcp1-python PATH            # and a server on mcp 1.x (that venv's python)
    python benchmarks/load.py --drop-spans                  # the same, the spans dropped instead of exported
    python benchmarks/load.py --smoke                       # a few calls each: checks it works, measures nothing

Each run is a fresh server process (`load_server.py`) in one mode, `plain`, `sdk`, `plugin` or `floor`, under
`--calls` tools/calls from this process: over stdio (one session, the only one a stdio server has, with 1 or
32 calls in flight) and over streamable HTTP with JSON answers (1 or 32 sessions, one call in flight each),
after 30 warm-up calls a session. Server CPU is the process's own (every thread: the exporter's too), read
from /proc across the timed calls; latency is each call's round trip as the client sees it; throughput is
calls over the timed window. Telemetry goes over OTLP/HTTP to a receiver in this process, with the SDK's
default schedules. Rounds are interleaved (every mode once, then again) so that drift on a shared machine
hits every mode alike; ratios are taken mode to mode within a round, and their median reported.
`--drop-spans` gives the batch span processor an exporter that drops what it is given: what the modes still
differ by is work done as the calls are served, not the SDK's encoding and sending of their spans.

Last, `uvicorn --workers 2` (stateless, JSON) under `opentelemetry-instrument` with the plugin: 32 sessions
make the calls, SIGTERM stops the supervisor, and every call's span and duration point must arrive (the
SDK's own export schedules would send nothing in the run: the plugin's export as SIGTERM ends each worker
delivers them).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from examples.otlp_sink import OtlpSink, exporter_environment  # noqa: E402
from tests.subprocess_servers import free_port, uvicorn_workers_command, wait_for_port  # noqa: E402

MODES = ("plain", "sdk", "plugin", "floor")
IN_FLIGHT = (1, 32)
WARM_UP = 30
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU so far, every thread included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def stdio_server_pid(tag: str) -> int:
    """The pid of the stdio server this process spawned with `tag` among its arguments."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                arguments = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if tag.encode() in arguments and int(entry.name) != os.getpid():
                return int(entry.name)
    raise RuntimeError(f"no server process with {tag}")


async def timed_calls(clients: list[Any], calls: int, in_flight: int, server_pid: Any) -> dict[str, Any]:
    """`calls` tools/calls, `in_flight` at a time, shared out over `clients` (one worker per client, or
    `in_flight` workers on the one client)."""
    for client in clients:
        for _ in range(WARM_UP):
            await client.call_tool("echo", {"text": "warm"})
    latencies: list[float] = []
    turns = iter(range(calls))

    async def worker(client: Any) -> None:
        for _ in turns:
            started = time.perf_counter()
            await client.call_tool("echo", {"text": "hello"})
            latencies.append(time.perf_counter() - started)

    pid = server_pid()
    cpu, started = cpu_seconds(pid), time.perf_counter()
    async with anyio.create_task_group() as workers:
        for n in range(in_flight):
            workers.start_soon(worker, clients[n % len(clients)])
    wall = time.perf_counter() - started
    return {"cpu": cpu_seconds(pid) - cpu, "wall": wall, "latencies": latencies}


DROPPING = {"LOAD_DROP_SPANS": "1"}


async def over_stdio(python: str, mode: str, endpoint: str, calls: int, in_flight: int, drop: bool) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    tag = f"load-{os.getpid()}-{time.monotonic_ns()}"
    params = StdioServerParameters(command=python, args=[str(HERE / "load_server.py"), mode, endpoint, "stdio", tag],
                                   env=DROPPING if drop else None)
    with open(os.devnull, "w") as quiet:  # the server's own log lines (mcp 1.x logs every request)
        async with Client(stdio_client(params, errlog=quiet), mode="legacy") as client:
            return await timed_calls([client], calls, in_flight, lambda: stdio_server_pid(tag))


async def over_http(url: str, calls: int, sessions: int, server_pid: int) -> dict[str, Any]:
    from contextlib import AsyncExitStack

    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(Client(streamable_http_client(url), mode="legacy"))
                   for _ in range(sessions)]
        return await timed_calls(clients, calls, sessions, lambda: server_pid)


def one_run(python: str, transport: str, mode: str, endpoint: str, calls: int, in_flight: int,
            drop: bool) -> dict[str, Any]:
    if transport == "stdio":
        return anyio.run(over_stdio, python, mode, endpoint, calls, in_flight, drop)
    port = free_port()
    server = subprocess.Popen([python, str(HERE / "load_server.py"), mode, endpoint, "http", str(port)],
                              env={**os.environ, **(DROPPING if drop else {})}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, server)
        return anyio.run(over_http, f"http://127.0.0.1:{port}/mcp", calls, in_flight, server.pid)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()


def figures(run: dict[str, Any]) -> dict[str, float]:
    latencies = sorted(run["latencies"])
    return {"cpu_us": 1e6 * run["cpu"] / len(latencies), "calls_per_s": len(latencies) / run["wall"],
            "p50_ms": 1000 * latencies[len(latencies) // 2],
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]}


def ratio(rounds: list[dict[str, dict[str, float]]], mode: str, baseline: str, key: str) -> str:
    values = [each[mode][key] / each[baseline][key] for each in rounds if each[baseline][key] > 0]
    return f"{statistics.median(values):.2f}" if values else ""


def measure(line: str, python: str, endpoint: str, calls: int, rounds: int, drop: bool) -> list[str]:
    rows = []
    for transport in ("stdio", "http"):
        for in_flight in IN_FLIGHT:
            per_round = [{mode: figures(one_run(python, transport, mode, endpoint, calls, in_flight, drop))
                          for mode in MODES} for _ in range(rounds)]
            shape = f"{in_flight} in flight" if transport == "stdio" else f"{in_flight} session(s)"
            for mode in MODES:
                median = {key: statistics.median(each[mode][key] for each in per_round) for key in per_round[0][mode]}
                rows.append(f"| {line} | {transport}, {shape} | {mode} | {median['cpu_us']:.0f} | "
                            f"{median['calls_per_s']:.0f} | {median['p50_ms']:.2f} | {median['p99_ms']:.2f} | "
                            f"{ratio(per_round, mode, 'plain', 'cpu_us')} | "
                            f"{ratio(per_round, mode, 'sdk', 'cpu_us')} | {ratio(per_round, mode, 'sdk', 'p99_ms')} |")
    return rows


async def uvicorn_clients(url: str, calls: int, sessions: int) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    turns = iter(range(calls))

    async def session() -> None:
        async with Client(streamable_http_client(url), mode="legacy") as client:
            for _ in turns:
                await client.call_tool("echo", {"text": "hello"})

    async with anyio.create_task_group() as sessions_running:
        for _ in range(sessions):
            sessions_running.start_soon(session)


def uvicorn_workers(python: str, calls: int) -> str:
    """Every worker's telemetry delivered as the supervisor stops them: spans and points = calls."""
    sink = OtlpSink().start()
    port = free_port()
    environment = {**os.environ, **exporter_environment(sink.endpoint), "OTEL_BSP_SCHEDULE_DELAY": "60000",
                   "OTEL_METRIC_EXPORT_INTERVAL": "60000", "OTEL_PYTHON_LOG_LEVEL": "error"}
    server = subprocess.Popen(uvicorn_workers_command(port, python=python), cwd=ROOT, env=environment,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, server)
        started = time.perf_counter()
        anyio.run(uvicorn_clients, f"http://127.0.0.1:{port}/mcp", calls, 32)
        wall = time.perf_counter() - started
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    finally:
        server.kill()
        sink.stop()
    spans = [span for span in sink.server_spans("otel_mcp_cancel") if span.attributes.get("mcp.method.name")
             == "tools/call"]
    points = sum(point.value for point in sink.points if point.metric == "mcp.server.operation.duration"
                 and point.attributes.get("mcp.method.name") == "tools/call")
    workers = len({span.resource.get("service.instance.id") for span in spans})
    return (f"uvicorn --workers 2, 32 sessions: {calls} calls in {wall:.1f} s ({calls / wall:.0f} calls/s); "
            f"delivered {len(spans)} spans and {points:.0f} duration points from {workers} worker(s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mcp1-python", help="python of a venv with mcp 1.x, otel-mcp-cancel and uvicorn")
    parser.add_argument("--drop-spans", action="store_true", help="spans are dropped instead of exported")
    parser.add_argument("--smoke", action="store_true", help="a few calls each, to check the benchmark works")
    options = parser.parse_args()
    calls, rounds = (40, 1) if options.smoke else (options.calls, options.rounds)
    from importlib.metadata import version

    lines = [(f"mcp {version('mcp')}", sys.executable)]
    if options.mcp1_python:
        found = subprocess.run([options.mcp1_python, "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
                               capture_output=True, text=True, check=True)
        lines.append((f"mcp {found.stdout.strip()}", options.mcp1_python))
    sink = OtlpSink(keep=False).start()
    print("| server | transport | mode | server CPU µs/call | calls/s | p50 ms | p99 ms | CPU / plain | "
          "CPU / sdk | p99 / sdk |\n|---|---|---|---|---|---|---|---|---|---|", flush=True)
    try:
        for line, python in lines:
            for row in measure(line, python, sink.endpoint, calls, rounds, options.drop_spans):
                print(row, flush=True)
    finally:
        sink.stop()
    for line, python in lines if not options.drop_spans else ():
        print(f"{line}: {uvicorn_workers(python, calls)}", flush=True)


if __name__ == "__main__":
    main()
