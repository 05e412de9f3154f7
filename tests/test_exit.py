"""A server under the plugin is never slower to exit than under the OpenTelemetry SDK alone, by more than 1 s,
when its OTLP endpoint is down: a closed port, a socket that accepts and never answers, an HTTP server that
answers 503 with Retry-After. Each way a server is stopped: a stdio caller's hang-up, after which the server
exits by itself (the exit hook, then the SDK's shutdown); SIGTERM to a stdio server still serving (the plugin
installs no handler: it dies as it would have); SIGTERM to a server uvicorn runs (a supervisor's stop: the plugin
exports as the app's session manager stops, for at most half a second, before uvicorn re-raises the signal).
Each is timed in the same test with the plugin and with it disabled, the gated server then recording a span and
a point of its own so that the SDK holds spans and points in both (what the SDK charges for exporting them is
its own). The exporters' timeout is short, so their retries' jittered back-off never runs and the times compared
are the processes', not the dice's. And with the endpoint up, a server stopped as its host or its supervisor
stops it loses nothing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.version import Version

from examples.otlp_sink import OtlpSink, exporter_environment
from tests.subprocess_servers import (
    free_port,
    instrumented_command,
    send_line,
    uvicorn_workers_command,
    wait_for_port,
)
from tests.support import until

ROOT = Path(__file__).resolve().parent.parent
# What may be added to the SDK's own time (the bound the plugin promises).
BOUND_SECONDS = 1.0
CALLS = 20


@contextmanager
def closed_port() -> Iterator[str]:
    yield f"http://127.0.0.1:{free_port()}"


@contextmanager
def black_hole() -> Iterator[str]:
    """Accepts every connection and never reads or answers."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for connection in held:
            connection.close()


@contextmanager
def unavailable() -> Iterator[str]:
    """503 Service Unavailable to every export, asking to retry after a second."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(503)
            self.send_header("Retry-After", "1")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# Each endpoint, with an exporter timeout under which one export ends the same way every time: a refused
# connection fails at once, and the back-off to its retry would pass the deadline; a black hole holds each
# attempt to the deadline; 503 waits Retry-After's second, exactly, between attempts.
ENDPOINTS = {"closed port": (closed_port, "0.5"), "black hole": (black_hole, "1"), "503": (unavailable, "2.5")}


def server_environment(endpoint: str, timeout: str, plugin: bool) -> dict[str, str]:
    environment = {**os.environ, **exporter_environment(endpoint), "OTEL_EXPORTER_OTLP_TIMEOUT": timeout,
                   # No scheduled export during a run, which would start at a moment of its own in each process:
                   # everything is exported as the process ends.
                   "OTEL_BSP_SCHEDULE_DELAY": "60000", "OTEL_METRIC_EXPORT_INTERVAL": "60000"}
    if not plugin:
        environment.update(OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="mcp_cancel", GATED_SERVER_OWN_TELEMETRY="1")
    return environment


def stdio_server_after_calls(tmp_path: Path, environment: dict[str, str]) -> subprocess.Popen:
    """The gated server over stdio, after CALLS answered calls (one failing)."""
    process = subprocess.Popen(instrumented_command(tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, env=environment, text=True)
    send_line(process, {"id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "exit", "version": "0"}}})
    process.stdout.readline()
    send_line(process, {"method": "notifications/initialized"})
    for request_id in range(1, CALLS + 1):
        tool = "broken" if request_id == 1 else "echo"
        send_line(process, {"id": request_id, "method": "tools/call",
                            "params": {"name": tool, "arguments": {"text": "x"}}})
        assert json.loads(process.stdout.readline())["id"] == request_id
    return process


def seconds_to_exit(process: subprocess.Popen, stop) -> float:
    started = time.monotonic()
    stop(process)
    process.wait(timeout=300)
    return time.monotonic() - started


def hang_up(process: subprocess.Popen) -> None:
    process.stdin.close()


def terminate(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)


def stdio_exit(tmp_path: Path, environment: dict[str, str], stop) -> float:
    process = stdio_server_after_calls(tmp_path, environment)
    try:
        return seconds_to_exit(process, stop)
    finally:
        process.kill()


def uvicorn_exit(tmp_path: Path, environment: dict[str, str]) -> float:
    """The gated server over streamable HTTP (uvicorn), a session's calls answered and the session closed,
    then SIGTERM as a supervisor stops it."""
    import anyio

    from tests.raw_peer import raw_peer_over
    from tests.subprocess_servers import http_streams

    port = free_port()
    process = subprocess.Popen(instrumented_command(tmp_path, "streamable-http", str(port)),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment)
    try:
        wait_for_port(port, process)

        async def calls() -> None:
            async with http_streams(f"http://127.0.0.1:{port}/mcp") as streams, raw_peer_over(*streams) as peer:
                for request_id in range(1, CALLS + 1):
                    await peer.call(request_id, "tools/call", {"name": "echo", "arguments": {"text": "x"}})

        anyio.run(calls)
        return seconds_to_exit(process, terminate)
    finally:
        process.kill()


PATHS = {
    "stdio hang-up, then its own exit": lambda tmp_path, environment: stdio_exit(tmp_path, environment, hang_up),
    "SIGTERM to a stdio server": lambda tmp_path, environment: stdio_exit(tmp_path, environment, terminate),
    "SIGTERM to uvicorn": uvicorn_exit,
}


@pytest.mark.long
@pytest.mark.timeout(300)
@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("path", PATHS)
def test_the_exit_with_the_endpoint_down_takes_at_most_a_second_more_than_the_sdk_alone(
    endpoint: str, path: str, tmp_path: Path
) -> None:
    serve, timeout = ENDPOINTS[endpoint]
    with serve() as url:
        alone = PATHS[path](tmp_path, server_environment(url, timeout, plugin=False))
        plugin = PATHS[path](tmp_path, server_environment(url, timeout, plugin=True))
    print(f"{path}, {endpoint}: {plugin:.2f} s with the plugin, {alone:.2f} s with the SDK alone")
    assert plugin <= alone + BOUND_SECONDS


@pytest.mark.anyio
async def test_a_stdio_server_stopped_as_its_host_stops_it_loses_no_span_and_no_point(
    sink: OtlpSink, tmp_path: Path
) -> None:
    """The SDK's schedules would export in a minute; the host closes stdin, and sends SIGTERM if the server is
    still running 2 s later (the SDK's stdio client does): every call is delivered either way."""
    process = stdio_server_after_calls(tmp_path, server_environment(sink.endpoint, "10", plugin=True))
    process.stdin.close()
    try:
        process.wait(timeout=2)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    calls = [span for span in sink.server_spans("otel_mcp_cancel")
             if span.attributes["mcp.method.name"] == "tools/call"]
    assert len(calls) == CALLS
    await until(lambda: sink.latest_points("mcp.server.operation.duration") != [], seconds=5)
    counts = {point.attributes["tool.outcome"]: point.value for point in sink.latest_points(
        "mcp.server.operation.duration") if point.attributes["mcp.method.name"] == "tools/call"}
    assert counts == {"ok": CALLS - 1, "failed": 1}


@pytest.mark.anyio
@pytest.mark.skipif(Version(version("opentelemetry-instrumentation")) < Version("0.63b0"),
                    reason="opentelemetry-instrument instruments spawned workers from 0.63b0 "
                    "(opentelemetry-python-contrib #4469); before, a uvicorn worker has no telemetry at all")
async def test_every_uvicorn_worker_exports_every_call_when_the_supervisor_stops_them(
    sink: OtlpSink, tmp_path: Path
) -> None:
    """`uvicorn --workers 2` stopped with SIGTERM: each worker stops gracefully and re-raises the signal, which
    kills it before any exit hook; the plugin's export as the app's session manager stops (the end of the
    lifespan, before the signal is re-raised) delivers every call's span and point."""
    import anyio

    from tests.raw_peer import raw_peer_over
    from tests.subprocess_servers import http_streams

    port = free_port()
    process = subprocess.Popen(uvicorn_workers_command(port), cwd=ROOT,
                               env=server_environment(sink.endpoint, "10", plugin=True),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    clients, calls_each = 8, 10
    try:
        wait_for_port(port, process)

        async def client(number: int) -> None:
            async with http_streams(f"http://127.0.0.1:{port}/mcp") as streams, raw_peer_over(*streams) as peer:
                for call in range(calls_each):
                    await peer.call(call, "tools/call", {"name": "echo", "arguments": {"text": f"{number}.{call}"}})

        async with anyio.create_task_group() as clients_running:
            for number in range(clients):
                clients_running.start_soon(client, number)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    finally:
        process.kill()
    calls = [span for span in sink.server_spans("otel_mcp_cancel")
             if span.attributes["mcp.method.name"] == "tools/call"]
    workers = {span.resource.get("service.instance.id") for span in calls}
    print(f"{len(calls)} calls' spans from {len(workers)} worker(s)")
    assert len(calls) == clients * calls_each
    points = [point for point in sink.points if point.metric == "mcp.server.operation.duration"
              and point.attributes["mcp.method.name"] == "tools/call"]
    assert sum(point.value for point in points) == clients * calls_each
