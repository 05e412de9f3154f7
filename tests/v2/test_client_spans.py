"""mcp 2.x clients: one CLIENT span per request, its outcome next to the server's, one trace for both."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from opentelemetry.trace import SpanKind

from tests.raw_peer import lowlevel_of, served_in_memory
from tests.servers import Gates, notes_server, raising_lowlevel_server
from tests.support import cancel_when, until

pytestmark = pytest.mark.anyio

SCOPE = "otel_mcp_cancel"


def events(span) -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, dict(e.attributes)) for e in span.events]


async def test_ok_and_failed_agree_and_share_one_trace(captured) -> None:
    async with Client(notes_server(Gates()), mode="legacy") as client:
        await client.call_tool("echo", {"text": "a"})
        await client.call_tool("broken", {"text": "b"})
    for name, outcome in (("tools/call echo", "ok"), ("tools/call broken", "failed")):
        client_span, server_span = captured.client_and_server(name)
        assert client_span.attributes["tool.outcome"] == server_span.attributes["tool.outcome"] == outcome
        assert client_span.instrumentation_scope.name == SCOPE
        assert server_span.context.trace_id == client_span.context.trace_id
        assert server_span.parent.span_id == client_span.context.span_id
    client_span, _ = captured.client_and_server("tools/call echo")
    assert dict(client_span.attributes) == {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "echo",
        "jsonrpc.request.id": client_span.attributes["jsonrpc.request.id"],
        "mcp.protocol.version": "2025-11-25",  # negotiated by initialize, as the server's span says too
        "mcp.server.name": "notes",  # as the server named itself in initialize's answer
        "tool.outcome": "ok",
    }
    broken, _ = captured.client_and_server("tools/call broken")
    assert broken.attributes["error.type"] == "tool_error" and broken.status.status_code.name == "ERROR"
    # One CLIENT span per request: the SDK's own "MCP send" span stepped aside.
    client_spans = captured.of_kind(SpanKind.CLIENT)
    assert {s.instrumentation_scope.name for s in client_spans} == {SCOPE}
    assert not any(s.name.startswith("MCP send") for s in client_spans)
    points = [p for p in captured.points("mcp.client.operation.duration") if "tool.outcome" in p.attributes]
    assert {(p.attributes["gen_ai.tool.name"], p.attributes["tool.outcome"]) for p in points} == {
        ("echo", "ok"),
        ("broken", "failed"),
    }


async def test_a_jsonrpc_error_is_an_error_on_the_client_whatever_its_code(captured) -> None:
    async with Client(lowlevel_of(raising_lowlevel_server()), mode="legacy") as client:
        with pytest.raises(Exception):
            await client.call_tool("anything", {})
    calls = [s for s in captured.of_kind(SpanKind.CLIENT) if s.attributes.get("mcp.method.name") == "tools/call"]
    (client_span,) = calls
    assert client_span.attributes["tool.outcome"] == "failed"
    assert client_span.attributes["error.type"] == client_span.attributes["rpc.response.status_code"] == "0"
    assert client_span.status.status_code.name == "ERROR"


async def test_a_caller_cancel_and_its_ghost_agree(captured) -> None:
    gates = Gates()
    async with Client(notes_server(gates), mode="legacy") as client:
        await cancel_when(gates.started.wait, lambda: client.call_tool("shielded_write", {"path": "x.md"}))
        await client.send_ping()
        gates.let_go()
        await until(lambda: any(s.name == "tools/call shielded_write" for s in captured.of_kind(SpanKind.SERVER)))
    client_span, server_span = captured.client_and_server("tools/call shielded_write")
    assert client_span.attributes["tool.outcome"] == server_span.attributes["tool.outcome"] == "cancelled"
    assert events(client_span) == [("tool.request_cancelled", {"tool.cancel_reason": "caller"})]
    assert events(server_span) == [
        ("tool.request_cancelled", {"tool.cancel_message": "caller cancelled"}),
        ("tool.ghost_response", {"tool.handler_outcome": "ok", "tool.ghost_risk": "unknown",
                                 "tool.ghost_kind": "suppressed"}),
    ]
    assert gates.side_effects == ["x.md"]
    assert client_span.status.status_code.name == "UNSET" and "error.type" not in client_span.attributes


async def test_a_timeout_is_cancelled_on_both_sides(captured) -> None:
    gates = Gates()
    async with Client(notes_server(gates), mode="legacy", read_timeout_seconds=0.05) as client:
        with pytest.raises(Exception, match="[Tt]imed out"):
            await client.call_tool("slow", {"text": "x"})
        await until(lambda: any(s.name == "tools/call slow" for s in captured.of_kind(SpanKind.SERVER)))
    client_span, server_span = captured.client_and_server("tools/call slow")
    assert client_span.attributes["tool.outcome"] == server_span.attributes["tool.outcome"] == "cancelled"
    assert events(client_span) == [("tool.request_cancelled", {"tool.cancel_reason": "timeout"})]
    ((name, attributes),) = events(server_span)
    assert name == "tool.request_cancelled" and attributes["tool.cancel_message"].startswith("timed out after")
    # The caller's timeout is the convention's error.type `timeout`; the outcome still says cancelled, and the
    # status stays UNSET by default. The server cannot tell a timeout from any cancel: no error.type there.
    assert (client_span.attributes["error.type"], client_span.status.status_code.name) == ("timeout", "UNSET")
    assert "error.type" not in server_span.attributes
    (point,) = [p for p in captured.points("mcp.client.operation.duration") if p.attributes.get("tool.outcome")]
    assert (point.attributes["tool.outcome"], point.attributes["error.type"]) == ("cancelled", "timeout")


async def test_the_2026_07_28_revision_has_no_sessions_and_its_version_is_on_every_span(captured) -> None:
    async with Client(served_in_memory(notes_server(Gates()))) as client:  # the client's default: discovery
        await client.call_tool("echo", {"text": "a"})
    (sent,) = [s for s in captured.of_kind(SpanKind.CLIENT) if s.name == "tools/call echo"]
    (served,) = [s for s in captured.of_kind(SpanKind.SERVER) if s.name == "tools/call echo"]
    assert sent.attributes["mcp.protocol.version"] == served.attributes["mcp.protocol.version"] == "2026-07-28"
    assert "mcp.session.id" not in sent.attributes and "mcp.session.id" not in served.attributes
    assert captured.points("mcp.client.session.duration") == captured.points("mcp.server.session.duration") == []


async def test_in_process_calls_agree_and_share_one_trace(captured) -> None:
    gates = Gates()
    async with Client(notes_server(gates)) as client:
        await client.call_tool("echo", {"text": "a"})
        await cancel_when(gates.started.wait, lambda: client.call_tool("slow", {"text": "x"}))
    client_span, server_span = captured.client_and_server("tools/call echo")
    assert client_span.attributes["tool.outcome"] == server_span.attributes["tool.outcome"] == "ok"
    assert server_span.parent.span_id == client_span.context.span_id
    client_span, server_span = captured.client_and_server("tools/call slow")
    assert client_span.attributes["tool.outcome"] == server_span.attributes["tool.outcome"] == "cancelled"
