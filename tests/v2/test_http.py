"""The same server over HTTP: streamable HTTP sessions (legacy), the 2026-07-28 single-exchange entry, and SSE."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.sse import sse_client

from examples.otlp_sink import OtlpSink, exporter_environment
from tests.support import cancel_when, until

pytestmark = pytest.mark.anyio

GATED_SERVER = Path(__file__).with_name("gated_server.py")
SCOPE = "otel_mcp_cancel"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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
    def __init__(self, sink: OtlpSink, vault: Path, transport: str) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("opentelemetry-instrument")),
                sys.executable,
                str(GATED_SERVER),
                str(vault),
                transport,
                str(self.port),
            ],
            env={**os.environ, **exporter_environment(sink.endpoint)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wait_for_port(self.port, self.process)

    def stop(self) -> None:
        """SIGINT: uvicorn shuts down, then re-raises the signal; as KeyboardInterrupt that still runs
        the SDK's exit hooks and flushes spans. A re-raised SIGTERM would kill the process unflushed."""
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def sink() -> Iterator[OtlpSink]:
    receiver = OtlpSink().start()
    yield receiver
    receiver.stop()


def spans_named(sink: OtlpSink, name: str) -> list:
    return [s for s in sink.server_spans(SCOPE) if s.name == name]


def started(client: Client):
    return lambda: client.call_tool("wait_started", {})


async def test_streamable_http_session(sink: OtlpSink, tmp_path: Path) -> None:
    server = HttpServer(sink, tmp_path, "streamable-http")
    try:
        async with Client(f"http://127.0.0.1:{server.port}/mcp", mode="legacy") as client:
            await client.call_tool("echo", {"text": "hi"})
            await client.call_tool("broken", {"text": "hi"})
            await cancel_when(started(client), lambda: client.call_tool("shielded_write", {"name": "ghost.md"}))
            await client.send_ping()  # same session, same ordered read loop: the cancel was read
            await client.call_tool("release", {})
            await until(lambda: (tmp_path / "ghost.md").exists())
    finally:
        server.stop()
    await until(lambda: spans_named(sink, "tools/call shielded_write") != [])
    (echo,) = spans_named(sink, "tools/call echo")
    assert echo.attributes["tool.outcome"] == "ok"
    assert echo.attributes["network.transport"] == "tcp"
    assert spans_named(sink, "tools/call broken")[0].attributes["tool.outcome"] == "failed"
    (ghost,) = spans_named(sink, "tools/call shielded_write")
    assert ghost.attributes["tool.outcome"] == "cancelled"
    assert [name for name, _ in ghost.events] == ["mcp.request.cancelled", "mcp.ghost_response.suppressed"]
    assert {s.scope for s in sink.server_spans() if "jsonrpc.request.id" in s.attributes} == {SCOPE}


async def test_single_exchange_http(sink: OtlpSink, tmp_path: Path) -> None:
    """2026-07-28 HTTP: one POST per request; a client cancels by hanging up."""
    server = HttpServer(sink, tmp_path, "streamable-http")
    try:
        async with Client(f"http://127.0.0.1:{server.port}/mcp") as client:
            await client.call_tool("echo", {"text": "hi"})
            await client.call_tool("broken", {"text": "hi"})
            await cancel_when(started(client), lambda: client.call_tool("slow", {"text": "never answered"}))
            await until(lambda: spans_named(sink, "tools/call slow") != [])
    finally:
        server.stop()
    (echo,) = spans_named(sink, "tools/call echo")
    assert echo.attributes["tool.outcome"] == "ok"
    assert echo.attributes["mcp.protocol.version"] == "2026-07-28"
    assert echo.attributes["network.transport"] == "tcp"
    assert spans_named(sink, "tools/call broken")[0].attributes["tool.outcome"] == "failed"
    (slow,) = spans_named(sink, "tools/call slow")
    assert slow.attributes["tool.outcome"] == "cancelled"
    assert slow.events == [("mcp.request.cancelled", {})]
    assert {s.scope for s in sink.server_spans() if "jsonrpc.request.id" in s.attributes} == {SCOPE}


async def test_sse(sink: OtlpSink, tmp_path: Path) -> None:
    server = HttpServer(sink, tmp_path, "sse")
    try:
        async with Client(sse_client(f"http://127.0.0.1:{server.port}/sse"), mode="legacy") as client:
            await client.call_tool("echo", {"text": "hi"})
            await client.call_tool("broken", {"text": "hi"})
    finally:
        server.stop()
    await until(lambda: spans_named(sink, "tools/call broken") != [])
    (echo,) = spans_named(sink, "tools/call echo")
    assert echo.attributes["tool.outcome"] == "ok"
    assert echo.attributes["network.transport"] == "tcp"
    assert spans_named(sink, "tools/call broken")[0].attributes["tool.outcome"] == "failed"
