"""Hostile or broken peers: bounded telemetry, nothing crashed, nothing left behind."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_mcp_cancel import attributes
from otel_mcp_cancel.request_state import LIVE
from tests.conftest import instrumentation
from tests.frameworks import SDK
from tests.raw_peer import is_result, lowlevel_of, raw_session
from tests.servers import Gates, notes_server
from tests.support import MCP_MAJOR, only_v2, until

pytestmark = pytest.mark.anyio


async def test_duplicate_and_malformed_cancels(captured) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates)) as peer:
        await peer.request(1, "tools/call", {"name": "slow", "arguments": {"text": "x"}})
        await gates.started.wait()
        await peer.notify("notifications/cancelled", {"requestId": {"not": "an id"}, "reason": "bad id"})
        await peer.notify("notifications/cancelled", {"reason": "no id at all"})
        await peer.notify("notifications/cancelled", {"requestId": 999, "reason": "unknown id"})
        await peer.notify("notifications/cancelled", {"requestId": 1, "reason": ["not", "a", "string"]})
        await peer.cancel(1, "second cancel")
        await peer.barrier("b1")
        assert not any(is_result(answer) for answer in peer.answers(1))
        # The server still answers.
        answer = await peer.call(2, "tools/call", {"name": "echo", "arguments": {"text": "still here"}})
        assert is_result(answer)
    (span,) = [s for s in captured.request_spans() if s.attributes.get("jsonrpc.request.id") == "1"]
    if MCP_MAJOR == 2:
        # 2.x reads only the id: the first cancel naming the request won, and its reason is not a string.
        assert [(e.name, dict(e.attributes)) for e in span.events] == [("tool.request_cancelled", {})]
    else:
        # 1.x validates the whole notification and drops the one with a list for a reason.
        reason = {"tool.cancel_message": "second cancel"}
        assert [(e.name, dict(e.attributes)) for e in span.events] == [("tool.request_cancelled", reason)]
    assert span.attributes["tool.outcome"] == "cancelled"
    assert len(LIVE) == 0


async def test_a_string_id_for_an_integer_request(captured) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates)) as peer:
        await peer.request(7, "tools/call", {"name": "slow", "arguments": {"text": "x"}})
        await gates.started.wait()
        await peer.cancel("7", "stringly typed")
        await peer.barrier("b")
        gates.let_go()
        if MCP_MAJOR == 1:
            assert is_result(await peer.answer(7))  # 1.x matches ids exactly: "7" cancels nothing
        await until(lambda: any(s.attributes.get("jsonrpc.request.id") == "7" for s in captured.request_spans()))
    (span,) = [s for s in captured.request_spans() if s.attributes.get("jsonrpc.request.id") == "7"]
    if MCP_MAJOR == 2:  # 2.x coerces the id, so the cancel finds the request
        assert span.attributes["tool.outcome"] == "cancelled"
        reason = {"tool.cancel_message": "stringly typed"}
        assert [(e.name, dict(e.attributes)) for e in span.events] == [("tool.request_cancelled", reason)]
    else:
        assert span.attributes["tool.outcome"] == "ok"
        assert span.events == ()


async def test_random_tool_names_do_not_grow_metric_series(captured) -> None:
    cached_before = attributes.metric_attributes.cache_info().currsize
    async with raw_session(notes_server(Gates())) as peer:
        for n in range(10_000):
            await peer.call(n, "tools/call", {"name": f"random-{n}-" + "x" * 500, "arguments": {}})
        await peer.call("echo", "tools/call", {"name": "echo", "arguments": {"text": "x"}})
    tools = {p.attributes.get("gen_ai.tool.name") for p in captured.points("mcp.server.operation.duration")}
    assert tools == {"_OTHER", "echo", None}  # None: initialize has no tool
    spans = [s for s in captured.server_spans() if s.attributes.get("mcp.method.name") == "tools/call"]
    assert {s.name for s in spans} == {"tools/call", "tools/call echo"}
    assert max(len(s.attributes["gen_ai.tool.name"]) for s in spans) == 256
    # The shared metric attribute sets are keyed by folded names: invented ones add one entry, not 10,000.
    assert attributes.metric_attributes.cache_info().currsize - cached_before <= 3
    assert len(LIVE) == 0


class _ToolCallNamesAtStart(SpanProcessor):
    """The name each tools/call span has as it starts: what a sampler sees."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if span.attributes.get("mcp.method.name") == "tools/call":
            self.names.append(span.name)


async def test_a_server_span_is_named_with_its_tool_as_it_starts_once_the_tool_was_served() -> None:
    """A tool name a server was found to serve names its next calls' spans as they start; one it does not
    serve never does, and a served name called where it is not served is folded again as its span ends."""
    starts, spans = _ToolCallNamesAtStart(), InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(starts)
    provider.add_span_processor(SimpleSpanProcessor(spans))
    elsewhere = SDK.make("elsewhere")  # serves no `echo`

    @elsewhere.tool()
    def shout(text: str) -> str:
        return text.upper()

    with instrumentation(tracer_provider=provider, meter_provider=MeterProvider()):
        async with raw_session(notes_server(Gates())) as peer:
            for request_id, tool in enumerate(("echo", "echo", "invented", "invented")):
                assert is_result(await peer.call(request_id, "tools/call", {"name": tool, "arguments": {"text": ""}}))
        async with raw_session(elsewhere) as peer:
            await peer.call(9, "tools/call", {"name": "echo", "arguments": {"text": ""}})
    assert starts.names == ["tools/call", "tools/call echo", "tools/call", "tools/call", "tools/call echo"]
    ended = sorted((s.attributes["jsonrpc.request.id"], s.name) for s in spans.get_finished_spans()
                   if s.attributes.get("mcp.method.name") == "tools/call")
    assert ended == [("0", "tools/call echo"), ("1", "tools/call echo"), ("2", "tools/call"), ("3", "tools/call"),
                     ("9", "tools/call")]


@only_v2  # a handler for a method of one's own: mcp 2.x's lowlevel API
async def test_random_method_names_do_not_grow_span_names_but_served_ones_keep_theirs(captured) -> None:
    from mcp_types import RequestParams

    async def extension_method(ctx: Any, params: Any) -> dict[str, Any]:
        return {}

    server = notes_server(Gates())
    lowlevel_of(server).add_request_handler("acme/status", RequestParams, extension_method)
    async with raw_session(server) as peer:
        for n in range(10_000):
            await peer.call(n, f"random/{n}-" + "x" * 500, {})
        assert is_result(await peer.call("served", "acme/status", {}))
    spans = captured.request_spans()
    assert {s.name for s in spans} == {"initialize", "_OTHER", "acme/status"}
    served = [s for s in spans if s.name == "acme/status"]
    assert [dict(s.attributes)["mcp.method.name"] for s in served] == ["acme/status"]
    assert all("mcp.method.name_original" not in s.attributes for s in served)
    invented = [s for s in spans if s.name == "_OTHER"]
    assert len(invented) == 10_000 and {s.attributes["mcp.method.name"] for s in invented} == {"_OTHER"}
    assert max(len(s.attributes["mcp.method.name_original"]) for s in invented) == 256
    methods = {p.attributes["mcp.method.name"] for p in captured.points("mcp.server.operation.duration")}
    assert methods == {"initialize", "_OTHER", "acme/status"}
    assert len(LIVE) == 0


async def test_malformed_params_are_a_failed_outcome(captured) -> None:
    """On mcp 1.x the first is refused in the session's receive loop, before any handler: its span is the
    plugin's alone."""
    async with raw_session(notes_server(Gates())) as peer:
        answer = await peer.call(1, "tools/call", {"name": ["not", "a", "name"], "arguments": "nope"})
        assert not is_result(answer)
        await peer.call(2, "tools/call", {"name": "echo", "arguments": {"wrong": "argument"}})
    spans = {s.attributes["jsonrpc.request.id"]: s for s in captured.server_spans() if "tool.outcome" in s.attributes}
    assert spans["1"].attributes["tool.outcome"] == "failed"
    assert spans["1"].attributes["error.type"] == "-32602"
    assert "gen_ai.tool.name" not in spans["1"].attributes
    assert spans["2"].attributes["tool.outcome"] == "failed"
    assert spans["2"].attributes["error.type"] == "tool_error"


async def test_a_request_the_line_refuses_has_its_span_and_point_and_invented_methods_fold(captured) -> None:
    """`server/discover` (what the Go SDK, the Inspector and rmcp open a 2026-07-28 connection with, a method of
    the protocol that these servers do not serve in this revision) and invented methods, on both lines: each is
    refused, and its span and point say so; invented ones under `_OTHER`, their name kept (cut to 256
    characters) on the span only. mcp 1.x refuses both in the session's receive loop, before any handler."""
    async with raw_session(notes_server(Gates())) as peer:
        discover = await peer.call("discover", "server/discover", {})
        invented = [await peer.call(n, f"random/{n}-" + "x" * 500, {}) for n in range(100)]
    assert not is_result(discover) and not any(is_result(answer) for answer in invented)
    spans = {s.attributes["jsonrpc.request.id"]: s for s in captured.request_spans()}
    assert spans["discover"].name == spans["discover"].attributes["mcp.method.name"] == "server/discover"
    assert spans["discover"].attributes["error.type"] == str(discover.error.code)
    folded = [spans[str(n)] for n in range(100)]
    assert {(s.name, s.attributes["mcp.method.name"]) for s in folded} == {("_OTHER", "_OTHER")}
    assert {s.attributes["error.type"] for s in folded} == {str(answer.error.code) for answer in invented}
    assert max(len(s.attributes["mcp.method.name_original"]) for s in folded) == 256
    counts = {p.attributes["mcp.method.name"]: p.count for p in captured.points("mcp.server.operation.duration")}
    assert (counts["server/discover"], counts["_OTHER"]) == (1, 100)


async def test_ten_thousand_distinct_cancel_reasons_mint_no_attribute_value(captured) -> None:
    """A peer's reason text is free: it reaches events only, so spans and metrics hold no value it wrote."""
    gates = Gates()
    async with raw_session(notes_server(gates)) as peer:
        for n in range(20):  # in flight: their spans' cancel events carry the text
            await peer.request(f"slow-{n}", "tools/call", {"name": "slow", "arguments": {"text": str(n)}})
        await gates.started.wait()
        for n in range(10_000):  # and for requests in flight, answered, or never sent
            target = f"slow-{n}" if n < 20 else n % 50
            await peer.cancel(target, f"reason-{n}-" + "r" * 300)
        await peer.barrier("cancels-read")
        gates.let_go()
        await until(lambda: len([s for s in captured.request_spans() if s.name == "tools/call slow"]) == 20)
    spans = captured.spans.get_finished_spans()
    assert len([s for s in spans if s.name == "notifications/cancelled"]) == 10_000
    assert [(s.name, key) for s in spans for key, value in s.attributes.items() if "reason-" in str(value)] == []
    texts = [e.attributes["tool.cancel_message"] for s in spans for e in s.events
             if "tool.cancel_message" in e.attributes]
    assert len(texts) >= 10_000 and max(len(text) for text in texts) == 256
    points = [p for values in captured.collect().values() for p in values]
    assert [p.attributes for p in points if any("reason-" in str(v) for v in p.attributes.values())] == []
    assert len(LIVE) == 0


async def test_random_prompt_names_do_not_grow_span_names_or_metric_series(captured) -> None:
    server = notes_server(Gates())

    @server.prompt()
    def greeting(name: str) -> str:
        return f"Hello, {name}"

    async with raw_session(server) as peer:
        for n in range(1_000):
            await peer.call(n, "prompts/get", {"name": f"random-{n}", "arguments": {}})
        assert is_result(await peer.call("known", "prompts/get", {"name": "greeting", "arguments": {"name": "Ada"}}))
    spans = [s for s in captured.request_spans() if s.attributes["mcp.method.name"] == "prompts/get"]
    assert {s.name for s in spans} == {"prompts/get", "prompts/get greeting"}
    assert len({s.attributes["gen_ai.prompt.name"] for s in spans}) == 1_001  # spans keep the name as sent
    points = [p for p in captured.points("mcp.server.operation.duration")
              if p.attributes["mcp.method.name"] == "prompts/get"]
    assert {p.attributes["gen_ai.prompt.name"] for p in points} == {"_OTHER", "greeting"}
