"""An unchanged FastMCP 1.x server in a subprocess under `opentelemetry-instrument`, driven over stdio,
streamable HTTP and SSE by a raw peer (the 1.x client never sends a cancel), exporting OTLP/HTTP to a real
receiver."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamablehttp_client

from examples.otlp_sink import OtlpSink, exporter_environment
from tests.conftest import is_request_span
from tests.raw_peer import RawPeer, is_result, raw_peer_over
from tests.subprocess_servers import HttpServer, instrumented_command
from tests.support import until

pytestmark = pytest.mark.anyio

SCOPE = "otel_mcp_cancel"


def stdio_server(sink: OtlpSink, vault: Path, **extra_env: str) -> StdioServerParameters:
    command, *args = instrumented_command(vault)
    return StdioServerParameters(command=command, args=args, env={**exporter_environment(sink.endpoint), **extra_env})


async def every_outcome_and_a_ghost(peer: RawPeer, vault: Path) -> None:
    await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    await peer.call(2, "tools/call", {"name": "broken", "arguments": {"text": "hi"}})
    await peer.call(3, "tools/call", {"name": "no_such_tool", "arguments": {}})
    await peer.request(4, "tools/call", {"name": "shielded_write", "arguments": {"name": "ghost.md"}})
    await peer.call(5, "tools/call", {"name": "wait_started", "arguments": {}})
    await peer.cancel(4, "caller cancelled")
    await peer.barrier("read-the-cancel")
    # Not awaited: without the plugin the ghost's late answer can end the session before this one is written.
    await peer.request(6, "tools/call", {"name": "release", "arguments": {}})
    await until(lambda: (vault / "ghost.md").exists())


def spans_by_id(sink: OtlpSink) -> dict[str, object]:
    """Request spans by request id (a cancel notification's span names the id it cancels)."""
    spans = sink.server_spans(SCOPE)
    return {s.attributes["jsonrpc.request.id"]: s for s in spans if is_request_span(s)}


def assert_every_outcome_and_the_ghost(sink: OtlpSink, transport: str) -> None:
    spans = spans_by_id(sink)
    assert [spans[i].attributes["tool.outcome"] for i in "1234"] == ["ok", "failed", "failed", "cancelled"]
    assert spans["2"].attributes["error.type"] == "tool_error"
    assert spans["3"].name == "tools/call"
    ghost = spans["4"]
    assert ghost.events == [
        ("tool.request_cancelled", {"tool.cancel_message": "caller cancelled"}),
        ("tool.ghost_response", {"tool.handler_outcome": "ok", "tool.ghost_risk": "unsafe",
                                 "tool.ghost_kind": "suppressed"}),
    ]
    assert ghost.status == "UNSET" and "error.type" not in ghost.attributes
    assert {s.attributes.get("network.transport") for s in spans.values()} == {transport}
    assert spans["init"].name == "initialize"
    (ghosts,) = sink.latest_points("tool.ghost_responses")
    assert ghosts.value == 1
    assert ghosts.attributes == {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "shielded_write",
        "tool.handler_outcome": "ok",
        "tool.ghost_risk": "unsafe", "tool.ghost_kind": "suppressed",
    }
    durations = {
        (p.attributes.get("gen_ai.tool.name"), p.attributes.get("tool.outcome"))
        for p in sink.latest_points("mcp.server.operation.duration")
    }
    assert ("shielded_write", ghost.attributes["tool.outcome"]) in durations
    assert ("_OTHER", spans["3"].attributes["tool.outcome"]) in durations


async def test_stdio(sink: OtlpSink, tmp_path: Path) -> None:
    async with stdio_client(stdio_server(sink, tmp_path)) as (read, write):
        async with raw_peer_over(read, write) as peer:
            await every_outcome_and_a_ghost(peer, tmp_path)
            # The guard kept the session alive: the same connection answers the next call.
            assert is_result(await peer.call(7, "tools/call", {"name": "echo", "arguments": {"text": "still"}}))
    await until(lambda: "4" in spans_by_id(sink) and sink.latest_points("tool.ghost_responses") != [])
    assert_every_outcome_and_the_ghost(sink, "pipe")


async def test_stdio_without_the_plugin_the_ghost_kills_the_server(sink: OtlpSink, tmp_path: Path) -> None:
    """The session dies on the late answer; the process lingers until its stdin closes, then shows why.
    (That the next call then goes unanswered is shown in-process, where the crash can be awaited.)"""
    server = stdio_server(sink, tmp_path, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="mcp_cancel")
    log = tmp_path / "server.log"
    with log.open("w") as errlog:
        async with stdio_client(server, errlog=errlog) as (read, write):
            async with raw_peer_over(read, write) as peer:
                await every_outcome_and_a_ghost(peer, tmp_path)
    assert "AssertionError: Request already responded to" in log.read_text()
    assert sink.server_spans() == []


async def test_streamable_http(sink: OtlpSink, tmp_path: Path) -> None:
    server = HttpServer(sink.endpoint, tmp_path, "streamable-http")
    try:
        async with streamablehttp_client(f"http://127.0.0.1:{server.port}/mcp") as (read, write, _):
            async with raw_peer_over(read, write) as peer:
                await every_outcome_and_a_ghost(peer, tmp_path)
                assert is_result(await peer.call(7, "tools/call", {"name": "echo", "arguments": {"text": "still"}}))
    finally:
        server.stop()
    await until(lambda: "4" in spans_by_id(sink) and sink.latest_points("tool.ghost_responses") != [])
    assert_every_outcome_and_the_ghost(sink, "tcp")


async def test_sse(sink: OtlpSink, tmp_path: Path) -> None:
    server = HttpServer(sink.endpoint, tmp_path, "sse")
    try:
        async with sse_client(f"http://127.0.0.1:{server.port}/sse") as (read, write):
            async with raw_peer_over(read, write) as peer:
                await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
                await peer.call(2, "tools/call", {"name": "broken", "arguments": {"text": "hi"}})
    finally:
        server.stop()
    await until(lambda: "2" in spans_by_id(sink))
    spans = spans_by_id(sink)
    assert spans["1"].attributes["tool.outcome"] == "ok"
    assert spans["2"].attributes["tool.outcome"] == "failed"
    assert spans["1"].attributes["network.transport"] == "tcp"
