"""Every outcome on real mcp 2.x sessions: a raw JSON-RPC peer and the SDK's own Client over memory streams.

Races are made deterministic: a tool signals that it started and waits for the
test to release it; the test sends the cancel, then a ping, and only releases
the tool once the ping's answer proves the server read the cancel.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from mcp import Client
from mcp.server import Server
from mcp_types import CallToolResult, JSONRPCError, JSONRPCResponse, TextContent
from opentelemetry.trace import StatusCode

from otel_mcp_cancel import ghost_stats
from otel_mcp_cancel.instruments import DURATION_BUCKETS
from tests.peers import PROTOCOL_VERSION, cancel_when, raw_session, until
from tests.servers import Gates, notes_server

pytestmark = pytest.mark.anyio

SCOPE = "otel_mcp_cancel"


def tools_call_attributes(request_id: str, tool: str, outcome: str, **extra: Any) -> dict[str, Any]:
    return {
        "mcp.method.name": "tools/call",
        "jsonrpc.request.id": request_id,
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "mcp.protocol.version": PROTOCOL_VERSION,
        "tool.outcome": outcome,
        **extra,
    }


def duration_point(captured, method: str, **attributes: Any):
    points = [
        p
        for p in captured.points("mcp.server.operation.duration")
        if p.attributes.get("mcp.method.name") == method
        and all(p.attributes.get(k) == v for k, v in attributes.items())
    ]
    assert len(points) == 1, [dict(p.attributes) for p in captured.points("mcp.server.operation.duration")]
    return points[0]


def events(span) -> list[tuple[str, dict[str, Any]]]:
    return [(event.name, dict(event.attributes)) for event in span.events]


async def span_for(captured, request_id: str):
    await until(lambda: any(s.attributes.get("jsonrpc.request.id") == request_id for s in captured.server_spans()))
    (span,) = [s for s in captured.server_spans() if s.attributes.get("jsonrpc.request.id") == request_id]
    return span


async def cancel_and_sync(peer, request_id: Any, reason: str | None, barrier_id: str = "barrier") -> None:
    await peer.cancel(request_id, reason)
    await peer.barrier(barrier_id)


async def test_ok(captured) -> None:
    async with raw_session(notes_server(Gates())) as peer:
        answer = await peer.call(10, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    assert isinstance(answer, JSONRPCResponse)
    span = await span_for(captured, "10")
    assert span.name == "tools/call echo"
    assert span.instrumentation_scope.name == SCOPE
    assert dict(span.attributes) == tools_call_attributes("10", "echo", "ok")
    assert span.status.status_code is StatusCode.UNSET
    assert events(span) == []
    point = duration_point(captured, "tools/call", **{"gen_ai.tool.name": "echo"})
    assert dict(point.attributes) == {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "echo",
        "mcp.protocol.version": PROTOCOL_VERSION,
        "tool.outcome": "ok",
    }
    assert point.attributes["tool.outcome"] == span.attributes["tool.outcome"]
    assert point.count == 1
    assert list(point.explicit_bounds) == list(DURATION_BUCKETS)


async def test_tool_error_is_failed(captured) -> None:
    async with raw_session(notes_server(Gates())) as peer:
        answer = await peer.call(11, "tools/call", {"name": "broken", "arguments": {"text": "hi"}})
    assert isinstance(answer, JSONRPCResponse) and answer.result["isError"] is True
    span = await span_for(captured, "11")
    assert dict(span.attributes) == tools_call_attributes("11", "broken", "failed", **{"error.type": "tool_error"})
    assert span.status.status_code is StatusCode.ERROR
    point = duration_point(captured, "tools/call", **{"gen_ai.tool.name": "broken"})
    assert point.attributes["tool.outcome"] == span.attributes["tool.outcome"] == "failed"
    assert point.attributes["error.type"] == "tool_error"


def lowlevel_server(handler) -> Server:
    async def list_tools(ctx, params):
        raise AssertionError("not listed in this test")

    return Server("lowlevel", on_call_tool=handler, on_list_tools=list_tools)


async def test_handler_exception_is_a_jsonrpc_error(captured) -> None:
    async def call_tool(ctx, params) -> CallToolResult:
        raise RuntimeError("boom")

    server = lowlevel_server(call_tool)
    async with raw_session(server) as peer:
        answer = await peer.call(12, "tools/call", {"name": "anything", "arguments": {}})
    assert isinstance(answer, JSONRPCError) and answer.error.code == 0
    span = await span_for(captured, "12")
    assert dict(span.attributes) == tools_call_attributes(
        "12", "anything", "failed", **{"error.type": "0", "rpc.response.status_code": "0"}
    )
    assert span.status.status_code is StatusCode.ERROR
    # A low-level server without a schema lookup has not listed "anything": it folds.
    assert span.name == "tools/call _OTHER"


async def test_invalid_params_is_failed_but_the_callers_fault(captured) -> None:
    async with raw_session(notes_server(Gates())) as peer:
        answer = await peer.call(13, "tools/call", {"arguments": {}})
    assert isinstance(answer, JSONRPCError) and answer.error.code == -32602
    span = await span_for(captured, "13")
    assert dict(span.attributes) == {
        "mcp.method.name": "tools/call",
        "jsonrpc.request.id": "13",
        "gen_ai.operation.name": "execute_tool",
        "mcp.protocol.version": PROTOCOL_VERSION,
        "tool.outcome": "failed",
        "error.type": "-32602",
        "rpc.response.status_code": "-32602",
    }
    assert span.status.status_code is StatusCode.UNSET


async def test_unknown_method_is_unset(captured) -> None:
    async with raw_session(notes_server(Gates())) as peer:
        answer = await peer.call(14, "no/such/method", {})
    assert isinstance(answer, JSONRPCError) and answer.error.code == -32601
    span = await span_for(captured, "14")
    assert dict(span.attributes) == {
        "mcp.method.name": "no/such/method",
        "jsonrpc.request.id": "14",
        "mcp.protocol.version": PROTOCOL_VERSION,
        "error.type": "-32601",
        "rpc.response.status_code": "-32601",
    }
    assert span.status.status_code is StatusCode.UNSET
    point = duration_point(captured, "_OTHER")
    assert point.attributes["error.type"] == "-32601"


async def test_cancel_interrupts_the_handler(captured, plugin_log) -> None:
    gates = Gates()
    before = ghost_stats().total
    async with raw_session(notes_server(gates)) as peer:
        await peer.request(20, "tools/call", {"name": "slow", "arguments": {"text": "hi"}})
        await gates.started.wait()
        await cancel_and_sync(peer, 20, "user pressed stop")
        span = await span_for(captured, "20")
        assert peer.answers(20) == []
    assert dict(span.attributes) == tools_call_attributes("20", "slow", "cancelled")
    assert span.status.status_code is StatusCode.UNSET
    assert events(span) == [("mcp.request.cancelled", {"mcp.cancel.reason": "user pressed stop"})]
    point = duration_point(captured, "tools/call", **{"gen_ai.tool.name": "slow"})
    assert point.attributes["tool.outcome"] == span.attributes["tool.outcome"] == "cancelled"
    assert "error.type" not in point.attributes
    assert captured.points("mcp.server.ghost_responses") == []
    assert ghost_stats().total == before
    assert plugin_log() == []


@pytest.mark.parametrize(
    ("tool", "handler_outcome"),
    [("shielded_write", "ok"), ("shielded_broken", "failed"), ("sync_write", "ok")],
)
async def test_ghost(captured, plugin_log, tool: str, handler_outcome: str) -> None:
    gates = Gates()
    before = ghost_stats().total
    async with raw_session(notes_server(gates)) as peer:
        await peer.request(30, "tools/call", {"name": tool, "arguments": {"path": "note.md"}})
        await until(lambda: gates.started.is_set() or gates.thread_started.is_set())
        await cancel_and_sync(peer, 30, "timed out after 1.0s")
        gates.let_go()
        span = await span_for(captured, "30")
        await peer.barrier("after")
        assert peer.answers(30) == []
    assert gates.side_effects == ["note.md"]
    assert dict(span.attributes) == tools_call_attributes("30", tool, "cancelled")
    assert span.status.status_code is StatusCode.UNSET
    assert events(span) == [
        ("mcp.request.cancelled", {"mcp.cancel.reason": "timed out after 1.0s"}),
        ("mcp.ghost_response.suppressed", {"tool.handler_outcome": handler_outcome}),
    ]
    (ghosts,) = captured.points("mcp.server.ghost_responses")
    assert dict(ghosts.attributes) == {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": tool,
        "tool.handler_outcome": handler_outcome,
    }
    assert ghosts.value == 1
    assert ghosts.attributes["tool.handler_outcome"] == span.events[1].attributes["tool.handler_outcome"]
    point = duration_point(captured, "tools/call", **{"gen_ai.tool.name": tool})
    assert point.attributes["tool.outcome"] == span.attributes["tool.outcome"] == "cancelled"
    (line,) = plugin_log()
    assert line.levelno == logging.WARNING and line.name == "otel_mcp_cancel"
    assert line.getMessage().startswith("mcp.ghost_response.suppressed_after_cancel_ack")
    assert repr(tool) in line.getMessage() and "request id 30" in line.getMessage()
    stats = ghost_stats()
    assert stats.total == before + 1 and stats.last_tool == tool and stats.last_seen is not None


async def test_cancel_after_the_answer_changes_nothing(captured) -> None:
    async with raw_session(notes_server(Gates())) as peer:
        await peer.call(40, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        await cancel_and_sync(peer, 40, "too late")
        assert len(peer.answers(40)) == 1
    span = await span_for(captured, "40")
    assert span.attributes["tool.outcome"] == "ok"
    assert events(span) == []


async def test_cancel_without_a_reason(captured) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates)) as peer:
        await peer.request(41, "tools/call", {"name": "slow", "arguments": {"text": "hi"}})
        await gates.started.wait()
        await cancel_and_sync(peer, 41, None)
        span = await span_for(captured, "41")
    assert span.attributes["tool.outcome"] == "cancelled"
    assert events(span) == [("mcp.request.cancelled", {})]


async def test_a_megabyte_reason_is_cut_to_256_characters(captured) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates)) as peer:
        await peer.request(42, "tools/call", {"name": "slow", "arguments": {"text": "hi"}})
        await gates.started.wait()
        await cancel_and_sync(peer, 42, "r" * 1_000_000)
        span = await span_for(captured, "42")
    assert events(span) == [("mcp.request.cancelled", {"mcp.cancel.reason": "r" * 256})]
    point = duration_point(captured, "tools/call", **{"gen_ai.tool.name": "slow"})
    assert all(len(str(value)) < 100 for value in point.attributes.values())


async def test_unknown_tool_folds_to_other_on_metrics(captured) -> None:
    async with raw_session(notes_server(Gates())) as peer:
        await peer.call(43, "tools/call", {"name": "no_such_tool", "arguments": {}})
    span = await span_for(captured, "43")
    assert span.name == "tools/call _OTHER"
    assert span.attributes["gen_ai.tool.name"] == "no_such_tool"
    assert span.attributes["tool.outcome"] == "failed"
    point = duration_point(captured, "tools/call", **{"gen_ai.tool.name": "_OTHER"})
    assert point.attributes["tool.outcome"] == "failed"


async def test_other_methods_get_cancel_and_ghost_handling_without_tool_outcome(captured, plugin_log) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates)) as peer:
        await peer.request(50, "resources/read", {"uri": "notes://today"})
        await gates.started.wait()
        await cancel_and_sync(peer, 50, "navigated away")
        gates.let_go()
        span = await span_for(captured, "50")
        assert peer.answers(50) == []
    assert dict(span.attributes) == {
        "mcp.method.name": "resources/read",
        "jsonrpc.request.id": "50",
        "mcp.resource.uri": "notes://today",
        "mcp.protocol.version": PROTOCOL_VERSION,
    }
    assert events(span) == [
        ("mcp.request.cancelled", {"mcp.cancel.reason": "navigated away"}),
        ("mcp.ghost_response.suppressed", {"tool.handler_outcome": "ok"}),
    ]
    (ghosts,) = captured.points("mcp.server.ghost_responses")
    assert dict(ghosts.attributes) == {"mcp.method.name": "resources/read", "tool.handler_outcome": "ok"}
    assert "tool.outcome" not in duration_point(captured, "resources/read").attributes
    assert len(plugin_log()) == 1


async def test_traceparent_in_meta_parents_the_server_span(captured) -> None:
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    parent = "b7ad6b7169203331"
    meta = {"traceparent": f"00-{trace_id}-{parent}-01"}
    async with raw_session(notes_server(Gates())) as peer:
        await peer.call(60, "tools/call", {"name": "echo", "arguments": {"text": "hi"}, "_meta": meta})
    span = await span_for(captured, "60")
    assert format(span.context.trace_id, "032x") == trace_id
    assert format(span.parent.span_id, "016x") == parent


async def test_sdk_client_session_exactly_one_server_span_per_request(captured) -> None:
    gates = Gates()
    async with Client(notes_server(gates), mode="legacy") as client:
        await client.call_tool("echo", {"text": "a"})
        await client.call_tool("broken", {"text": "b"})
        await client.list_tools()
    requests = [s for s in captured.server_spans() if "jsonrpc.request.id" in s.attributes]
    assert {s.instrumentation_scope.name for s in requests} == {SCOPE}
    ids = [s.attributes["jsonrpc.request.id"] for s in requests]
    assert len(ids) == len(set(ids))
    # initialize, two tools/call, the client's own tools/list refresh, and the explicit tools/list.
    assert sorted(s.name for s in requests) == sorted(
        ["initialize", "tools/call echo", "tools/call broken", "tools/list", "tools/list"]
    )


async def test_sdk_client_caller_cancel_is_cancelled_with_its_reason(captured) -> None:
    gates = Gates()
    async with Client(notes_server(gates), mode="legacy") as client:
        await cancel_when(gates.started.wait, lambda: client.call_tool("shielded_write", {"path": "x.md"}))
        await client.send_ping()
        gates.let_go()
        await until(lambda: any(s.name == "tools/call shielded_write" for s in captured.server_spans()))
    (span,) = [s for s in captured.server_spans() if s.name == "tools/call shielded_write"]
    assert span.attributes["tool.outcome"] == "cancelled"
    assert events(span) == [
        ("mcp.request.cancelled", {"mcp.cancel.reason": "caller cancelled"}),
        ("mcp.ghost_response.suppressed", {"tool.handler_outcome": "ok"}),
    ]
    assert gates.side_effects == ["x.md"]


async def test_sdk_client_timeout_is_cancelled(captured) -> None:
    gates = Gates()
    async with Client(notes_server(gates), mode="legacy", read_timeout_seconds=0.05) as client:
        with pytest.raises(Exception, match="[Tt]imed out"):
            await client.call_tool("slow", {"text": "x"})
        await until(lambda: any(s.name == "tools/call slow" for s in captured.server_spans()))
    (span,) = [s for s in captured.server_spans() if s.name == "tools/call slow"]
    assert span.attributes["tool.outcome"] == "cancelled"
    ((name, attributes),) = events(span)
    assert name == "mcp.request.cancelled" and attributes["mcp.cancel.reason"].startswith("timed out after")


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
        assert [e.name for e in span.events] == ["mcp.request.cancelled"]
