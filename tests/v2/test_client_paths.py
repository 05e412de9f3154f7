"""mcp 2.x's own Client over memory streams and in-process: what a real 2.x caller does to a server."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT, TextContent

from tests.servers import Gates, notes_server
from tests.support import cancel_when

pytestmark = pytest.mark.anyio

SCOPE = "otel_mcp_cancel"


def events(span) -> list[tuple[str, dict[str, Any]]]:
    return [(event.name, dict(event.attributes)) for event in span.events]


async def test_sdk_client_session_exactly_one_server_span_per_request(captured) -> None:
    gates = Gates()
    async with Client(notes_server(gates), mode="legacy") as client:
        await client.call_tool("echo", {"text": "a"})
        await client.call_tool("broken", {"text": "b"})
        await client.list_tools()
    requests = captured.request_spans()
    assert {s.instrumentation_scope.name for s in requests} == {SCOPE}
    ids = [s.attributes["jsonrpc.request.id"] for s in requests]
    assert len(ids) == len(set(ids))
    # initialize, two tools/call, the client's own tools/list refresh, and the explicit tools/list.
    assert sorted(s.name for s in requests) == sorted(
        ["initialize", "tools/call echo", "tools/call broken", "tools/list", "tools/list"]
    )


class TestInProcessDirectPath:
    """`Client(server)` on 2.x dispatches in-process with no JSON-RPC at all."""

    async def test_ok_and_failed(self, captured) -> None:
        async with Client(notes_server(Gates())) as client:
            ok = await client.call_tool("echo", {"text": "a"})
            failed = await client.call_tool("broken", {"text": "b"})
        assert ok.content == [TextContent(type="text", text="a")] and failed.is_error
        spans = [s for s in captured.server_spans() if "tool.outcome" in s.attributes]
        outcomes = {s.name: s.attributes["tool.outcome"] for s in spans}
        assert outcomes == {"tools/call echo": "ok", "tools/call broken": "failed"}
        assert {s.instrumentation_scope.name for s in captured.server_spans()} == {SCOPE}

    async def test_a_result_returned_to_a_cancelled_caller_is_delivered(self, captured, plugin_log) -> None:
        """In-process, the handler runs in the caller's task: a shielded tool's result still reaches the caller."""
        gates = Gates()
        async with Client(notes_server(gates)) as client:
            result = await cancel_when(
                gates.started.wait, lambda: client.call_tool("shielded_write", {"path": "direct.md"}), then=gates.let_go
            )
        assert result.content == [TextContent(type="text", text="wrote direct.md")]
        (span,) = [s for s in captured.server_spans() if s.name == "tools/call shielded_write"]
        assert span.attributes["tool.outcome"] == "ok"
        assert events(span) == []
        assert plugin_log() == []

    async def test_caller_cancel_interrupts(self, captured) -> None:
        gates = Gates()
        async with Client(notes_server(gates)) as client:
            await cancel_when(gates.started.wait, lambda: client.call_tool("slow", {"text": "x"}))
        (span,) = [s for s in captured.server_spans() if s.name == "tools/call slow"]
        assert span.attributes["tool.outcome"] == "cancelled"
        assert [e.name for e in span.events] == ["tool.request_cancelled"]

    async def test_the_clients_own_timeout_is_a_timeout_cancel_on_both_ends(self, captured) -> None:
        """No JSON-RPC cancel is sent in-process: the client's span learns of its timeout from the error."""
        async with Client(notes_server(Gates()), read_timeout_seconds=0.05) as client:
            with pytest.raises(MCPError) as raised:
                await client.call_tool("slow", {"text": "x"})
        assert raised.value.error.code == REQUEST_TIMEOUT
        client_span, server_span = captured.client_and_server("tools/call slow")
        assert client_span.attributes["tool.outcome"] == server_span.attributes["tool.outcome"] == "cancelled"
        assert events(client_span) == [("tool.request_cancelled", {"tool.cancel_reason": "timeout"})]
        assert events(server_span) == [("tool.request_cancelled", {})]
