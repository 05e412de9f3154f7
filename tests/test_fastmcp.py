"""Standalone FastMCP (PyPI `fastmcp`) as a first-class server and client: one SERVER span per request
whatever the instrumentation scope, FastMCP's details kept on it, tools named and risked from FastMCP's
own registry on the first call, and fastmcp.Client's calls traced by ours.

The outcome contract itself runs on FastMCP through the `framework` parameter of the shared suites
(test_server_outcomes, test_ghost_forensics); this module covers what only FastMCP has.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path
from typing import Any

import pytest
from mcp.client.stdio import StdioServerParameters, stdio_client
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from examples.otlp_sink import OtlpSink, exporter_environment
from otel_mcp_cancel import config
from tests.conftest import is_request_span
from tests.frameworks import FASTMCP_MAJOR, FASTMCP_VERSION, FRAMEWORKS
from tests.raw_peer import RawPeer, is_result, raw_peer_over, raw_session
from tests.servers import Gates, annotated_server, make_ghost, notes_server
from tests.subprocess_servers import HttpServer, ghost_then_retry, http_streams, instrumented_command
from tests.support import MCP_MAJOR, until

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(FASTMCP_MAJOR is None, reason="standalone FastMCP is not installed"),
]

SCOPE = "otel_mcp_cancel"
FASTMCP = FRAMEWORKS[-1]  # last when installed; the module is skipped otherwise
with_own_telemetry = pytest.mark.skipif(FASTMCP_MAJOR == 2, reason="FastMCP 2.x makes no spans of its own")
UNSAFE = {"readOnlyHint": False, "idempotentHint": False}


def spans_of(captured: Any, request_id: str) -> list[Any]:
    """Every SERVER span of one request, in any instrumentation scope."""
    return [
        span
        for span in captured.server_spans()
        if is_request_span(span) and span.attributes.get("jsonrpc.request.id") == request_id
    ]


async def the_span_of(captured: Any, request_id: str) -> Any:
    await until(lambda: spans_of(captured, request_id) != [])
    (span,) = spans_of(captured, request_id)
    return span


async def every_outcome(peer: RawPeer, gates: Gates) -> None:
    """A ghost, then (its gate left open) ok, failed, an unknown tool, a read and a ping: request ids 6, 1 to 5."""
    await make_ghost(peer, gates, 6, "shielded_write", "a.md")
    assert is_result(await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    assert is_result(await peer.call(2, "tools/call", {"name": "broken", "arguments": {"text": "hi"}}))
    await peer.call(3, "tools/call", {"name": "no_such_tool", "arguments": {}})
    assert is_result(await peer.call(4, "resources/read", {"uri": "notes://today"}))
    assert is_result(await peer.call(5, "ping"))


async def test_one_server_span_per_request_across_every_scope(captured) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates, FASTMCP)) as peer:
        await every_outcome(peer, gates)
    expected = {
        "1": ("tools/call echo", "ok"),
        "2": ("tools/call broken", "failed"),
        "3": ("tools/call", "failed"),
        "4": ("resources/read", None),
        "5": ("ping", None),
        "6": ("tools/call shielded_write", "cancelled"),
    }
    for request_id, (name, outcome) in expected.items():
        span = await the_span_of(captured, request_id)
        assert (span.name, span.attributes.get("tool.outcome")) == (name, outcome)
        assert span.instrumentation_scope.name == SCOPE
    assert {s.instrumentation_scope.name for s in captured.server_spans()} == {SCOPE}


@with_own_telemetry
async def test_fastmcp_keeps_its_details_on_our_span(captured) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates, FASTMCP)) as peer:
        await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        await peer.call(2, "tools/call", {"name": "broken", "arguments": {"text": "hi"}})
        await make_ghost(peer, gates, 3, "shielded_broken", "a.md")
        await peer.barrier("after")
    ok, failed, ghost = [await the_span_of(captured, request_id) for request_id in ("1", "2", "3")]
    fastmcp = FASTMCP.its_attributes(ok)
    assert fastmcp["fastmcp.server.name"] == "notes"
    assert fastmcp["fastmcp.component.type"] == "tool"
    assert "echo" in fastmcp["fastmcp.component.key"]
    assert isinstance(fastmcp["mcp.session.id"], str) and fastmcp["mcp.session.id"]
    # What FastMCP records of an exception becomes our one bounded exception event (no message by default);
    # the verdict is ours: no FastMCP error.type, request id as sent.
    assert exceptions(failed) == [("ValueError", None)]
    assert (failed.attributes["error.type"], failed.attributes["jsonrpc.request.id"]) == ("tool_error", "2")
    assert "error.type" not in ghost.attributes and ghost.attributes["tool.outcome"] == "cancelled"
    assert exceptions(ghost) == [("ValueError", None)]  # the tool raised after its side effect


def exceptions(span: Any) -> list[tuple[str, str | None]]:
    return [(event.attributes["exception.type"], event.attributes.get("exception.message"))
            for event in span.events if event.name == "exception"]


@with_own_telemetry
async def test_spans_made_under_fastmcp_are_children_of_our_span(captured) -> None:
    server = FASTMCP.make("traced")
    tracer = trace.get_tracer("the-application")

    @server.tool()
    async def lookup(key: str) -> str:
        with tracer.start_as_current_span("database lookup"):
            return key

    async with raw_session(server) as peer:
        await peer.call(1, "tools/call", {"name": "lookup", "arguments": {"key": "k"}})
    span = await the_span_of(captured, "1")
    (child,) = [s for s in captured.spans.get_finished_spans() if s.name == "database lookup"]
    assert child.parent.span_id == span.context.span_id
    assert child.context.trace_id == span.context.trace_id


def mount(parent: Any, child: Any, prefix: str) -> None:
    if FASTMCP_MAJOR == 2:
        parent.mount(child, prefix=prefix)
    else:
        parent.mount(child, namespace=prefix)


async def test_tools_are_named_and_risked_from_fastmcps_registry_on_the_first_call(captured) -> None:
    """No tools/list is ever sent: decorated, added, mounted (prefixed) and disabled tools are known from FastMCP."""
    from fastmcp.tools import Tool

    gates = Gates()
    parent = notes_server(Gates(), FASTMCP)
    mount(parent, annotated_server(gates, UNSAFE, FASTMCP), "vault")
    parent.add_tool(Tool.from_function(lambda: "added", name="added"))
    gone = parent.tool(name="gone")(lambda: "never")
    if FASTMCP_MAJOR == 2:
        gone.disable()
    else:
        parent.disable(names={"gone"})
    async with raw_session(parent) as peer:
        await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        await make_ghost(peer, gates, 2, "vault_commit", "a.md")
        await peer.call(3, "tools/call", {"name": "gone", "arguments": {}})
        await peer.call(4, "tools/call", {"name": "added", "arguments": {}})
        await peer.barrier("after")
    echo, ghost, gone_span, added = [await the_span_of(captured, request_id) for request_id in ("1", "2", "3", "4")]
    assert (echo.name, added.name) == ("tools/call echo", "tools/call added")
    assert ghost.name == "tools/call vault_commit"
    assert (ghost.attributes["tool.outcome"], ghost.attributes["tool.ghost_risk"]) == ("cancelled", "unsafe")
    (ghosts,) = captured.points("tool.ghost_responses")
    assert dict(ghosts.attributes)["gen_ai.tool.name"] == "vault_commit"
    assert ghosts.attributes["tool.ghost_risk"] == ghost.attributes["tool.ghost_risk"]
    # A disabled tool is refused, and still one of the server's own: its name is bounded by the registry.
    assert (gone_span.name, gone_span.attributes["tool.outcome"]) == ("tools/call gone", "failed")


async def test_a_call_fastmcps_middleware_refused_is_still_named(captured) -> None:
    from fastmcp.exceptions import ToolError
    from fastmcp.server.middleware import Middleware

    class Refusing(Middleware):
        async def on_call_tool(self, context: Any, call_next: Any) -> Any:
            raise ToolError("not for you")

    server = notes_server(Gates(), FASTMCP)
    server.add_middleware(Refusing())
    async with raw_session(server) as peer:
        await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        await peer.call(2, "tools/call", {"name": "no_such_tool", "arguments": {}})
    refused, unknown = [await the_span_of(captured, request_id) for request_id in ("1", "2")]
    assert (refused.name, refused.attributes["tool.outcome"]) == ("tools/call echo", "failed")
    # FastMCP 3.x on mcp 1.x: the SDK lists the tools to check the call's input and FastMCP opens its span for
    # that listing under ours; the listing's details (an empty component key) are not the call's.
    assert "fastmcp.component.key" not in refused.attributes
    assert (unknown.name, unknown.attributes["gen_ai.tool.name"]) == ("tools/call", "no_such_tool")
    names = {point.attributes.get("gen_ai.tool.name") for point in captured.points("mcp.server.operation.duration")
             if point.attributes["mcp.method.name"] == "tools/call"}
    assert names == {"echo", "_OTHER"}


async def test_a_call_cancelled_before_fastmcp_reached_its_tool_is_still_named(captured) -> None:
    """A middleware holds the call; the cancel ends it there: the tool never ran, and is still no _OTHER."""
    from fastmcp.server.middleware import Middleware

    gates = Gates()

    class Holding(Middleware):
        async def on_call_tool(self, context: Any, call_next: Any) -> Any:
            gates.started.set()
            await gates.release.wait()
            return await call_next(context)

    server = notes_server(Gates(), FASTMCP)
    server.add_middleware(Holding())
    async with raw_session(server) as peer:
        await peer.request(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        await gates.started.wait()
        await peer.cancel(1, "stop")
        await peer.barrier("after")
        span = await the_span_of(captured, "1")
    assert (span.name, span.attributes["tool.outcome"]) == ("tools/call echo", "cancelled")
    assert "tool.handler_outcome" not in span.attributes  # interrupted before the tool: no ghost


@pytest.mark.skipif(FASTMCP_MAJOR in (2, 3), reason="FastMCP's telemetry mode setting arrived in 4.x")
@pytest.mark.parametrize("mode", ["propagation_only", "off"])
async def test_fastmcps_own_telemetry_setting_changes_nothing_for_us(captured, monkeypatch, mode: str) -> None:
    import fastmcp

    monkeypatch.setattr(fastmcp.settings, "telemetry_mode", mode)
    gates = Gates()
    async with raw_session(notes_server(gates, FASTMCP)) as peer:
        await every_outcome(peer, gates)
    for request_id, outcome in (("1", "ok"), ("2", "failed"), ("3", "failed"), ("6", "cancelled")):
        span = await the_span_of(captured, request_id)
        assert span.attributes["tool.outcome"] == outcome
        assert FASTMCP.its_attributes(span) == {}  # FastMCP wrote nothing: it opened no span to write on
    assert (await the_span_of(captured, "6")).attributes["tool.ghost_risk"] == "unknown"


async def test_fastmcps_client_calls_get_our_client_spans_in_one_trace_with_the_server(captured) -> None:
    from fastmcp import Client

    gates = Gates()
    async with Client(notes_server(gates, FASTMCP)) as client:
        await client.call_tool("echo", {"text": "hi"})
        with pytest.raises(Exception):  # noqa: B017 - each line raises its own timeout error
            await client.call_tool("slow", {"text": "hi"}, timeout=0.05)
        gates.let_go()
    calls = [s for s in captured.of_kind(SpanKind.CLIENT) if s.attributes.get("mcp.method.name") == "tools/call"]
    assert {s.instrumentation_scope.name for s in captured.of_kind(SpanKind.CLIENT)} == {SCOPE}
    echo, slow = sorted(calls, key=lambda s: s.start_time)
    assert (echo.name, echo.attributes["tool.outcome"]) == ("tools/call echo", "ok")
    (served,) = [s for s in captured.request_spans() if s.name == "tools/call echo"]
    assert served.parent.span_id == echo.context.span_id and served.context.trace_id == echo.context.trace_id
    assert (slow.attributes["tool.outcome"], slow.attributes["tool.cancel_reason"]) == ("cancelled", "timeout")


async def test_over_stdio_one_span_per_request_and_the_first_ghost_has_its_risk(sink: OtlpSink, tmp_path) -> None:
    command, *args = instrumented_command(tmp_path)
    environment = {**os.environ, **exporter_environment(sink.endpoint), "GATED_FRAMEWORK": "fastmcp"}
    async with stdio_client(StdioServerParameters(command=command, args=args, env=environment)) as streams:
        async with raw_peer_over(*streams) as peer:
            await ghost_then_retry(peer, tmp_path)
            await until(lambda: any(s.attributes.get("jsonrpc.request.id") == "103" for s in sink.server_spans()))
    assert_one_span_per_request(sink, "pipe")


async def test_over_streamable_http_one_span_per_request_and_the_first_ghost_has_its_risk(
    sink: OtlpSink, tmp_path: Path
) -> None:
    server = HttpServer(sink.endpoint, tmp_path, "streamable-http", GATED_FRAMEWORK="fastmcp")
    try:
        async with http_streams(f"http://127.0.0.1:{server.port}/mcp") as streams:
            async with raw_peer_over(*streams) as peer:
                await ghost_then_retry(peer, tmp_path)
    finally:
        server.stop()
    await until(lambda: any(s.attributes.get("jsonrpc.request.id") == "103" for s in sink.server_spans()))
    assert_one_span_per_request(sink, "tcp")


def assert_one_span_per_request(sink: OtlpSink, transport: str) -> None:
    requests = [s for s in sink.server_spans() if is_request_span(s)]
    ids = [s.attributes["jsonrpc.request.id"] for s in requests]
    assert len(ids) == len(set(ids))  # one SERVER span per request, whatever the scope
    assert {s.scope for s in requests} == {SCOPE}
    (ghost,) = [s for s in requests if s.attributes["jsonrpc.request.id"] == "100"]
    assert ghost.name == "tools/call shielded_write"
    assert (ghost.attributes["tool.outcome"], ghost.attributes["tool.ghost_risk"]) == ("cancelled", "unsafe")
    assert ghost.attributes["network.transport"] == transport
    (retry,) = [s for s in requests if s.attributes["jsonrpc.request.id"] == "103"]
    assert retry.attributes["tool.retried_ghost_risk"] == "unsafe"


def test_a_fastmcp_outside_the_tested_range_is_left_alone_with_a_warning(monkeypatch, caplog) -> None:
    import otel_mcp_cancel

    monkeypatch.setattr(otel_mcp_cancel, "_instruments_fastmcp_any", ("fastmcp >= 99", "fastmcp-slim >= 99"))
    caplog.set_level("WARNING", logger="otel_mcp_cancel")
    modules = [type(make(None)).__module__ for _, make, _ in otel_mcp_cancel._hook_makers(config.read())]
    line = f"v{MCP_MAJOR}"
    assert modules[:2] == [f"otel_mcp_cancel.hooks.server_{line}", f"otel_mcp_cancel.hooks.client_{line}"]
    assert modules == [type(make(None)).__module__ for _, make, _ in otel_mcp_cancel._sdk_hook_makers(config.read())]
    assert not any("fastmcp" in module for module in modules)
    assert "fastmcp >= 99 or fastmcp-slim >= 99" in caplog.text and "traced through the SDK alone" in caplog.text
    assert f"FastMCP {FASTMCP_VERSION} (distribution " in caplog.text


def test_fastmcp_is_hooked_whichever_distribution_provides_it(caplog) -> None:
    """`fastmcp`, or `fastmcp-slim` alone (pydantic-ai's dependency; CI has an environment of each)."""
    import otel_mcp_cancel

    caplog.set_level("WARNING", logger="otel_mcp_cancel")
    (distribution, *_) = importlib.metadata.packages_distributions()["fastmcp"]
    modules = [type(make(None)).__module__ for _, make, _ in otel_mcp_cancel._hook_makers(config.read())]
    assert "otel_mcp_cancel.hooks.fastmcp_server" in modules, (distribution, modules)
    assert caplog.text == ""


def test_fastmcp_installed_from_its_source_is_hooked_by_its_distributions_name(monkeypatch, caplog) -> None:
    """An editable install (FastMCP's own checkout, as its test suite runs) lists none of the package's files in
    its RECORD (only its finder): no distribution claims the package, and it is found by name."""
    import otel_mcp_cancel

    caplog.set_level("WARNING", logger="otel_mcp_cancel")
    read_text = importlib.metadata.PathDistribution.read_text

    def editable_record(self: importlib.metadata.PathDistribution, filename: str) -> str | None:
        if filename == "RECORD":
            return "__editable___fastmcp_finder.py,,\nfastmcp.dist-info/METADATA,,\n"
        return read_text(self, filename)

    monkeypatch.setattr(importlib.metadata.PathDistribution, "read_text", editable_record)
    monkeypatch.setattr(importlib.metadata.PathDistribution, "files", property(lambda self: None))
    modules = [type(make(None)).__module__ for _, make, _ in otel_mcp_cancel._hook_makers(config.read())]
    assert "otel_mcp_cancel.hooks.fastmcp_server" in modules
    assert caplog.text == ""
