"""The same server over HTTP: streamable HTTP sessions (legacy), the 2026-07-28 single-exchange entry, and SSE."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from mcp.client.sse import sse_client

from examples.otlp_sink import OtlpSink
from tests.conftest import is_request_span
from tests.subprocess_servers import HttpServer
from tests.support import cancel_when, until

pytestmark = pytest.mark.anyio

SCOPE = "otel_mcp_cancel"


def spans_named(sink: OtlpSink, name: str) -> list:
    return [s for s in sink.server_spans(SCOPE) if s.name == name]


def started(client: Client):
    return lambda: client.call_tool("wait_started", {})


def assert_client_span_joins_the_server_span(captured, sink: OtlpSink, name: str, port: int) -> None:
    (client,) = [s for s in captured.spans.get_finished_spans() if s.kind.name == "CLIENT" and s.name == name]
    (server,) = spans_named(sink, name)
    assert client.attributes["network.transport"] == "tcp"
    assert client.attributes["server.address"] == "127.0.0.1" and client.attributes["server.port"] == port
    assert server.trace_id == format(client.context.trace_id, "032x")  # one trace over HTTP
    assert server.parent_span_id == format(client.context.span_id, "016x")


async def test_streamable_http_session(captured, sink: OtlpSink, tmp_path: Path) -> None:
    server = HttpServer(sink.endpoint, tmp_path, "streamable-http")
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
    assert [name for name, _ in ghost.events] == ["tool.request_cancelled", "tool.ghost_response"]
    assert {s.scope for s in sink.server_spans() if is_request_span(s)} == {SCOPE}
    assert_client_span_joins_the_server_span(captured, sink, "tools/call echo", server.port)


async def test_single_exchange_http(captured, sink: OtlpSink, tmp_path: Path) -> None:
    """2026-07-28 HTTP: one POST per request; a client cancels by hanging up."""
    server = HttpServer(sink.endpoint, tmp_path, "streamable-http")
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
    assert slow.events == [("tool.request_cancelled", {})]
    assert {s.scope for s in sink.server_spans() if is_request_span(s)} == {SCOPE}
    assert_client_span_joins_the_server_span(captured, sink, "tools/call echo", server.port)


@pytest.mark.parametrize("client_traced", [False, True], ids=["server-alone", "both"])
@pytest.mark.parametrize("answers", ["sse", "json"])
async def test_single_exchange_answer_after_its_caller_left_is_a_ghost(
    request: pytest.FixtureRequest, sink: OtlpSink, tmp_path: Path, answers: str, client_traced: bool
) -> None:
    """2026-07-28 HTTP: the caller gives up on a write by closing its POST; the write then finishes. Its answer is
    written into the closed connection (JSON answers: uvicorn drops it) or never written (SSE: the SDK stops the
    exchange as it reads the close). Either way the caller was told nothing but that it gave up: a ghost, on the
    server's span whether or not the client is traced."""
    captured = request.getfixturevalue("captured") if client_traced else None
    environment = {"GATED_SERVER_JSON": "1"} if answers == "json" else {}
    server = HttpServer(sink.endpoint, tmp_path, "streamable-http", **environment)
    try:
        async with Client(f"http://127.0.0.1:{server.port}/mcp") as client:
            seen = await cancel_when(started(client), lambda: client.call_tool("shielded_write", {"name": "g.md"}))
            # Its POST is closed before this one is sent: the server's socket holds that close as it answers.
            await client.call_tool("release", {})
            await until(lambda: (tmp_path / "g.md").exists())
            await until(lambda: spans_named(sink, "tools/call shielded_write") != [])
            await until(lambda: sink.latest_points("tool.ghost_responses") != [])
    finally:
        server.stop()
    assert seen is None  # what the caller saw: nothing but its own give-up
    (ghost,) = spans_named(sink, "tools/call shielded_write")
    assert ghost.attributes["mcp.protocol.version"] == "2026-07-28"
    assert (ghost.attributes["tool.outcome"], ghost.attributes["tool.handler_outcome"]) == ("cancelled", "ok")
    assert ghost.status == "UNSET"
    assert ghost.events == [
        ("tool.request_cancelled", {}),
        ("tool.ghost_response", {"tool.handler_outcome": "ok", "tool.ghost_risk": "unsafe",
                                 "tool.ghost_kind": "suppressed"}),
    ]
    (ghosts,) = sink.latest_points("tool.ghost_responses")
    assert (ghosts.attributes["gen_ai.tool.name"], ghosts.attributes["tool.ghost_kind"], ghosts.value) == (
        "shielded_write", "suppressed", 1)
    (released,) = spans_named(sink, "tools/call release")
    assert released.attributes["tool.outcome"] == "ok" and "tool.ghost_kind" not in released.attributes
    if captured is not None:
        (given_up,) = [s for s in captured.spans.get_finished_spans()
                       if s.kind.name == "CLIENT" and s.name == "tools/call shielded_write"]
        assert given_up.attributes["tool.outcome"] == "cancelled"
        assert ghost.trace_id == format(given_up.context.trace_id, "032x")


async def test_sse(sink: OtlpSink, tmp_path: Path) -> None:
    server = HttpServer(sink.endpoint, tmp_path, "sse")
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
