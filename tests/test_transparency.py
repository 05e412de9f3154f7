"""The plugin changes nothing but telemetry: it never calls the application's code, never changes an object
the caller owns, and a failing detail never costs a request its verdict or its measurement."""

from __future__ import annotations

import copy
import inspect
from typing import Any

import pytest
from opentelemetry.trace import SpanKind

from otel_mcp_cancel import tool_registry
from tests.raw_peer import is_error, is_result, raw_session, served_in_memory
from tests.sdk_client import sdk_client
from tests.servers import Gates, make_ghost, notes_server
from tests.support import only_v1, only_v2, until

pytestmark = pytest.mark.anyio


def tools_call_durations(captured: Any) -> list[tuple[str, str]]:
    return [
        (point.attributes["gen_ai.tool.name"], point.attributes["tool.outcome"])
        for point in captured.points("mcp.server.operation.duration")
        if "tool.outcome" in point.attributes
    ]


@only_v2  # the callback is a 2.x low-level server's
async def test_the_applications_schema_callback_is_never_called(captured, plugin_log) -> None:
    from mcp.server import Server
    from mcp_types import CallToolResult, TextContent

    if "get_tool_input_schema" not in inspect.signature(Server.__init__).parameters:
        pytest.skip("this mcp's low-level server has no schema callback")
    asked: list[str] = []

    def get_tool_input_schema(name: str) -> Any:
        asked.append(name)
        raise RuntimeError("catalog unavailable")

    async def call_tool(ctx: Any, params: Any) -> Any:
        return CallToolResult(content=[TextContent(type="text", text="done")])

    server = Server("catalog", on_call_tool=call_tool, get_tool_input_schema=get_tool_input_schema)
    async with raw_session(server) as peer:
        assert is_result(await peer.call(1, "tools/call", {"name": "lookup", "arguments": {}}))
    assert asked == []
    # Registered or not, only a callback could tell: the name folds, the verdict and its measurement stay.
    (span,) = [s for s in captured.request_spans() if s.attributes["mcp.method.name"] == "tools/call"]
    assert span.name == "tools/call"
    assert span.attributes["tool.outcome"] == "ok"
    assert tools_call_durations(captured) == [("_OTHER", "ok")]
    assert plugin_log() == []


async def test_a_failing_detail_costs_only_that_detail(captured, plugin_log, monkeypatch) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("bug in a lookup")

    monkeypatch.setattr(tool_registry, "is_registered", broken)
    monkeypatch.setattr(tool_registry, "listed_annotations", broken)
    gates = Gates()
    async with raw_session(notes_server(gates)) as peer:
        await make_ghost(peer, gates, 1, "shielded_write", "a.md")
        answer = await peer.call(2, "tools/call", {"name": "no-such-tool", "arguments": {}})
        assert not is_result(answer) or answer.result.get("isError")
        await until(lambda: len([s for s in captured.request_spans() if "tool.outcome" in s.attributes]) == 2)
    spans = {s.attributes["jsonrpc.request.id"]: s for s in captured.request_spans()}
    ghost = spans["1"]
    assert (ghost.name, ghost.attributes["tool.outcome"]) == ("tools/call shielded_write", "cancelled")
    assert [(e.name, dict(e.attributes)) for e in ghost.events][1:] == [
        ("tool.ghost_response", {"tool.handler_outcome": "ok", "tool.ghost_risk": "unknown",
                                 "tool.ghost_kind": "suppressed"})
    ]
    unknown = spans["2"]
    assert (unknown.name, unknown.attributes["tool.outcome"]) == ("tools/call", "failed")
    assert sorted(tools_call_durations(captured)) == [("_OTHER", "failed"), ("shielded_write", "cancelled")]
    assert sum(point.value for point in captured.points("tool.ghost_responses")) == 1
    faults = [r.getMessage() for r in plugin_log() if "otel_mcp_cancel.fault" in r.__dict__]
    assert faults == [
        "otel_mcp_cancel: judging a ghost's risk failed; the MCP request itself is unaffected",
        "otel_mcp_cancel: resolving a server request failed; the MCP request itself is unaffected",
    ]


@only_v1  # mcp 2.x puts trace context into `_meta` itself, by design
async def test_the_callers_requests_are_never_changed_on_1x(captured) -> None:
    from mcp import types

    meta = types.RequestParams.Meta.model_validate({"tenant": "acme"})
    call = types.ClientRequest(
        types.CallToolRequest(
            method="tools/call",
            params=types.CallToolRequestParams(name="echo", arguments={"text": "a"}, _meta=meta),
        )
    )
    ping = types.ClientRequest(types.PingRequest(method="ping"))
    before = copy.deepcopy([call, ping])
    async with sdk_client(served_in_memory(notes_server(Gates()))) as client:
        session = client._session
        for _ in range(2):  # a request reused: each send carries its own trace context, none left behind
            await session.send_request(call, types.CallToolResult)
            await session.send_request(ping, types.EmptyResult)
    assert [call, ping] == before
    assert call.root.params.meta is meta and meta.model_dump() == {"progressToken": None, "tenant": "acme"}
    assert ping.root.params is None
    server_calls = [s for s in captured.request_spans() if s.name == "tools/call echo"]
    client_calls = [s for s in captured.of_kind(SpanKind.CLIENT) if s.name == "tools/call echo"]
    assert sorted(s.parent.span_id for s in server_calls) == sorted(s.context.span_id for s in client_calls)


async def test_requests_without_params_join_the_callers_trace(captured) -> None:
    """ping and (on 1.30) tools/list go without params; a 1.x client sends `_meta` for them as 2.x does."""
    async with sdk_client(served_in_memory(notes_server(Gates()))) as client:
        await client.ping()
        await client.list_tools()
    for method in ("ping", "tools/list"):
        client_span, server_span = captured.client_and_server(method)
        assert server_span.context.trace_id == client_span.context.trace_id
        assert server_span.parent.span_id == client_span.context.span_id


async def test_a_cancel_after_the_answer_gets_its_span(captured) -> None:
    async with raw_session(notes_server(Gates())) as peer:
        assert is_result(await peer.call(5, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
        await peer.cancel(5, "too late")
        await peer.cancel(99, "never sent")
        await peer.barrier("cancels-read")
        assert not any(is_error(answer, 0) for answer in peer.answers(5))
    cancels = [s for s in captured.server_spans() if s.name == "notifications/cancelled"]
    assert [dict(s.attributes) for s in cancels] == [
        {"mcp.method.name": "notifications/cancelled", "tool.cancelled_request_id": "5"},
        {"mcp.method.name": "notifications/cancelled", "tool.cancelled_request_id": "99"},
    ]
    assert [[(e.name, dict(e.attributes)) for e in s.events] for s in cancels] == [
        [("tool.cancel_received", {"tool.cancel_message": "too late"})],
        [("tool.cancel_received", {"tool.cancel_message": "never sent"})],
    ]
    (answered,) = [s for s in captured.request_spans() if s.name == "tools/call echo"]
    assert answered.attributes["tool.outcome"] == "ok" and answered.events == ()
    # The cancel for the answered call crossed its answer: it links to that call, whose ghost it is; the cancel
    # for a request never sent is only its own span.
    assert [[link.context.span_id for link in s.links] for s in cancels] == [[answered.context.span_id], []]
    (crossed,) = [s for s in captured.spans.get_finished_spans() if s.name == "tool.ghost_response"]
    assert (crossed.parent.span_id, crossed.attributes["tool.ghost_kind"]) == (answered.context.span_id, "crossed")
