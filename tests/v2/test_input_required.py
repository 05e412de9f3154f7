"""The 2026-07-28 multi-round-trip flow on mcp 2.3: a tool answers `input_required` (it asks its caller for input,
with an opaque `requestState`), and the caller completes the call with a new request that echoes the state with
its input. The interim answer is no outcome yet (the tool has not run to its end): its span and point carry
`mcp.result_type=input_required` and no `tool.outcome`. The request that completes it carries the outcome and
links to the interim span, on the server and on the SDK's client (whose driver makes the second round)."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.server import Server
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY
from opentelemetry.trace import SpanKind, StatusCode

from tests.raw_peer import RawPeer, served_in_memory

pytestmark = pytest.mark.anyio

ENVELOPE = {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_CAPABILITIES_META_KEY: {"elicitation": {"form": {}}}}


def booking_server(state: str | None = "booking-1") -> Server:
    """`book` asks for a confirmation first (with `state`, or none: a server that keeps no state), then books."""

    async def call_tool(ctx: Any, params: Any) -> Any:
        if not params.input_responses:
            question = types.ElicitRequestFormParams(message="Book it?", requested_schema={"type": "object",
                                                                                          "properties": {}})
            return types.InputRequiredResult(input_requests={"confirm": types.ElicitRequest(params=question)},
                                             request_state=state and f"{state}:{params.arguments}")
        return types.CallToolResult(content=[types.TextContent(type="text", text="booked")])

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="book", input_schema={"type": "object"})])

    return Server("booking", on_call_tool=call_tool, on_list_tools=list_tools)


def tools_calls(captured: Any, kind: SpanKind) -> list[Any]:
    return sorted((span for span in captured.of_kind(kind) if span.attributes.get("mcp.method.name") == "tools/call"),
                  key=lambda span: span.start_time)


@pytest.mark.parametrize("state", ["booking-1", None], ids=["with its state", "stateless"])
async def test_an_interim_answer_is_no_outcome_and_the_request_that_completes_it_links_to_it(
    captured, state: str | None
) -> None:
    """Linked by the state it echoes; with none, by the call it repeats and the input requests it answers (another
    call of the tool, with other arguments, in flight meanwhile, is not linked)."""
    async with served_in_memory(booking_server(state)) as (read_stream, write_stream):
        async with anyio.create_task_group() as tg:
            peer = RawPeer(read_stream, write_stream)
            tg.start_soon(peer.pump)
            interim = await peer.call(1, "tools/call", {"name": "book", "arguments": {}, "_meta": ENVELOPE})
            assert interim.result["resultType"] == "input_required"
            assert ("requestState" in interim.result) == (state is not None)
            other = await peer.call(3, "tools/call", {"name": "book", "arguments": {"seat": 2}, "_meta": ENVELOPE})
            assert other.result["resultType"] == "input_required"
            echoed = {"requestState": interim.result["requestState"]} if state is not None else {}
            done = await peer.call(2, "tools/call", {"name": "book", "arguments": {}, "_meta": ENVELOPE,
                                                    "inputResponses": {"confirm": {"action": "accept", "content": {}}},
                                                    **echoed})
            assert done.result["resultType"] == "complete"
            tg.cancel_scope.cancel()
    first, interim_of_other, second = tools_calls(captured, SpanKind.SERVER)
    assert interim_of_other.attributes["jsonrpc.request.id"] == "3"
    assert first.attributes["mcp.result_type"] == "input_required" and "tool.outcome" not in first.attributes
    assert first.status.status_code is StatusCode.UNSET and [event.name for event in first.events] == []
    assert second.attributes["tool.outcome"] == "ok" and "mcp.result_type" not in second.attributes
    assert [link.context.span_id for link in second.links] == [first.context.span_id]
    points = [point for point in captured.points("mcp.server.operation.duration")
              if point.attributes.get("mcp.method.name") == "tools/call"]
    assert sorted((point.attributes.get("mcp.result_type", ""), point.attributes.get("tool.outcome", ""), point.count)
                  for point in points) == [("", "ok", 1), ("input_required", "", 2)]


@pytest.mark.parametrize("state", ["booking-1", None], ids=["with its state", "stateless"])
async def test_the_sdk_clients_second_round_links_to_its_first(captured, state: str | None) -> None:
    async def confirm(ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={})

    async with Client(booking_server(state), elicitation_callback=confirm) as client:
        result = await client.call_tool("book", {})
    assert [content.text for content in result.content] == ["booked"]
    first, second = tools_calls(captured, SpanKind.CLIENT)
    assert (first.name, first.attributes["mcp.result_type"]) == ("tools/call book", "input_required")
    assert "tool.outcome" not in first.attributes
    assert second.attributes["tool.outcome"] == "ok" and "mcp.result_type" not in second.attributes
    assert [link.context.span_id for link in second.links] == [first.context.span_id]
    server_first, server_second = tools_calls(captured, SpanKind.SERVER)
    assert server_first.parent.span_id == first.context.span_id  # each round is one trace, client and server
    assert [link.context.span_id for link in server_second.links] == [server_first.context.span_id]
