"""The gated server as a subprocess under `opentelemetry-instrument`, exporting OTLP/HTTP to a test receiver."""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from examples.otlp_sink import exporter_environment
from tests.raw_peer import RawPeer, is_result
from tests.support import until

GATED_SERVER = Path(__file__).resolve().parent / "gated_server.py"
GO_PROGRAMS = Path(__file__).resolve().parent / "clients" / "go"


def instrumented_script(script: Path, *args: str, python: str = sys.executable) -> list[str]:
    """A server script under `opentelemetry-instrument`, run by `python` (this environment's, or another's)."""
    return [str(Path(python).with_name("opentelemetry-instrument")), python, str(script), *args]


def instrumented_command(vault: Path, *transport: str, python: str = sys.executable) -> list[str]:
    """The gated server under `opentelemetry-instrument`."""
    return instrumented_script(GATED_SERVER, str(vault), *transport, python=python)


def uvicorn_workers_command(port: int, workers: int = 2, python: str = sys.executable) -> list[str]:
    """`uvicorn tests.workers_app:app --workers N` under `opentelemetry-instrument` (run it from the checkout)."""
    return [str(Path(python).with_name("opentelemetry-instrument")), python, "-m", "uvicorn", "tests.workers_app:app",
            "--workers", str(workers), "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]


def require(what: str, found: Any, how: str) -> Any:
    """`found`, or a skip saying how to get `what`; under CI (which installs it) a failure instead."""
    if not found:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"{what} is missing: {how}")
    return found


def go_program(package: str) -> Path:
    """A Go program of tests/clients/go (`.`: the client, `./server`: the server), built once a test run."""
    return _built_go(require("go", shutil.which("go"), "install Go"), package)


@functools.cache
def _built_go(go: str, package: str) -> Path:
    """Built in a folder of its own: two environments' runs at once must not share one."""
    built = Path(tempfile.mkdtemp()) / "go_program"
    done = subprocess.run([go, "build", "-o", str(built), package], cwd=GO_PROGRAMS, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return built


def require_debian_binary(binary: str) -> str:
    """The path of a program from Debian's package of that name (.ci/run installs it)."""
    return require(binary, shutil.which(binary), f"apt-get install {binary}")


def stdio_gated_server(vault: Path, endpoint: str, framework: str = "sdk") -> subprocess.Popen:
    """The gated server over stdio (`framework`: `sdk`, `lowlevel` or `fastmcp`) under `opentelemetry-instrument`,
    exporting traces, metrics and logs to `endpoint` only as the plugin delivers them or the process exits (no export
    schedule runs during a test), after its `initialize`."""
    environment = {**os.environ, **exporter_environment(endpoint), "OTEL_LOGS_EXPORTER": "otlp_proto_http",
                   "OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED": "true",
                   "OTEL_BSP_SCHEDULE_DELAY": "60000", "OTEL_METRIC_EXPORT_INTERVAL": "60000",
                   "OTEL_BLRP_SCHEDULE_DELAY": "60000"}
    if framework != "sdk":
        environment["GATED_FRAMEWORK"] = framework
    process = subprocess.Popen(instrumented_command(vault), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, env=environment, text=True)
    send_line(process, {"id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "host", "version": "0"}}})
    assert json.loads(process.stdout.readline())["id"] == 0
    send_line(process, {"method": "notifications/initialized"})
    return process


def call_over_pipe(process: subprocess.Popen, request_id: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tools/call on a stdio server started with text pipes, and its answer (the next line it writes)."""
    send_line(process, {"id": request_id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
    answer = json.loads(process.stdout.readline())
    assert answer["id"] == request_id, answer
    return answer


def send_line(process: subprocess.Popen, message: dict[str, Any]) -> None:
    """Write one JSON-RPC message to a stdio server started with text pipes, as a client's line."""
    process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    process.stdin.flush()


def free_port() -> int:
    """A port free now for a server a test starts, from below the kernel's ephemeral range: a port the kernel
    hands out (to any `bind(0)`, say another environment's test server, as CI runs them side by side) can then
    never be the one this server is about to take. From 20000 up: the backends' own fixed ports (Jaeger's 13133
    to 16686, Phoenix's 6006, Prometheus's 9090, Redis's 6379) lie below."""
    ephemeral_from = _ephemeral_ports_start()
    if ephemeral_from <= 20_000:  # a kernel configured to hand out nearly every port: take one of its own
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return probe.getsockname()[1]
    for _ in range(100):
        port = random.randrange(20_000, ephemeral_from)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port below {ephemeral_from}")


def _ephemeral_ports_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default, and below the IANA range other systems use


def stop_process(process: subprocess.Popen, signum: int = signal.SIGTERM) -> None:
    """Ask a process to end with `signum`, and kill it if it has not within 30 s."""
    process.send_signal(signum)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_for_port(port: int, process: subprocess.Popen, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else "server exited"
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"server did not listen on {port}")


class HttpServer:
    """The gated server (or another `script` taking the same arguments) on `transport`, exporting OTLP/HTTP
    to `endpoint`."""

    def __init__(self, endpoint: str, vault: Path, transport: str, python: str = sys.executable,
                 script: Path = GATED_SERVER, **environment: str) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            instrumented_script(script, str(vault), transport, str(self.port), python=python),
            env={**os.environ, **exporter_environment(endpoint), **environment},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wait_for_port(self.port, self.process)

    def stop(self, signum: int = signal.SIGINT) -> None:
        """SIGINT: uvicorn shuts down, then re-raises the signal; as KeyboardInterrupt that still runs
        the SDK's exit hooks and flushes spans. A re-raised SIGTERM would kill the process unflushed,
        unless the server handles it (tests/task_server.py does)."""
        stop_process(self.process, signum)


@asynccontextmanager
async def http_streams(url: str) -> AsyncIterator[tuple[Any, Any]]:
    """A streamable HTTP client's (read, write) streams: `streamable_http_client` where the line has it
    (1.x releases before 1.2x have only `streamablehttp_client`, which adds a session-id getter)."""
    from mcp.client import streamable_http

    connect = getattr(streamable_http, "streamable_http_client", None) or streamable_http.streamablehttp_client
    async with connect(url) as streams:
        yield streams[0], streams[1]


async def gated_ghost(peer: RawPeer, vault: Path) -> None:
    """On the gated server: request 100 becomes a ghost of `shielded_write` (unsafe); its file is written.

    The release (102) is not awaited: on mcp 1.x without the guard the ghost's late answer ends the session
    before that answer is written."""
    await peer.request(100, "tools/call", {"name": "shielded_write", "arguments": {"name": "g.md"}})
    await peer.call(101, "tools/call", {"name": "wait_started", "arguments": {}})
    await peer.cancel(100, "timed out after 30.0s")
    await peer.barrier("read-the-cancel")
    await peer.request(102, "tools/call", {"name": "release", "arguments": {}})
    await until(lambda: (vault / "g.md").exists())


async def ghost_then_retry(peer: RawPeer, vault: Path) -> None:
    """The gated ghost (request 100), then request 103 retries it."""
    await gated_ghost(peer, vault)
    retry = await peer.call(103, "tools/call", {"name": "shielded_write", "arguments": {"name": "g.md"}})
    assert is_result(retry)
