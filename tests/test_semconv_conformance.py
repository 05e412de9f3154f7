"""What the plugin emits, against the MCP semantic conventions (tests/data/semconv_mcp.yaml, transcribed from
semantic-conventions-genai at the commits it names): span kinds, names, required and conditional attributes,
types and well-known values, metric instruments, units, buckets and attributes, and every name of our own
against docs/telemetry.md. Each transport the plugin sees a request on: memory streams (both ends in this
process), stdio and streamable HTTP (the server in a subprocess, exporting OTLP). Only the deviations
docs/telemetry.md lists (with their reasons) are accepted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import Histogram, Sum

from examples.otlp_sink import OtlpSink, ReceivedSpan, exporter_environment
from otel_mcp_cancel.conventions import SCHEMA_URL_DEFAULT as SCHEMA_URL
from tests.raw_peer import raw_peer_over, raw_session, served_in_memory
from tests.sdk_client import sdk_client
from tests.semconv import CONVENTION, DEVIATIONS, OWN_NAMES, Emitted, metric_differences, span_differences
from tests.servers import Gates, notes_server
from tests.subprocess_servers import HttpServer, http_streams, instrumented_command
from tests.support import cancel_when, until

pytestmark = pytest.mark.anyio

SCOPE = "otel_mcp_cancel"
# The deviations docs/telemetry.md must list, exactly: each is accepted by tests/semconv.py by this label.
EXPECTED_DEVIATIONS = {"session-duration buckets", "`error.type` with status UNSET",
                       "`gen_ai.prompt.name` on a server's metrics",
                       "`-32020`, `-32021`, `-32022` are the caller's fault",
                       "`subscriptions/listen` in the operation durations",
                       "the peers' names: `mcp.client.name`, `mcp.client.version`, `mcp.server.name`, "
                       "`mcp.server.version`"}


def conformance_server(gates: Gates) -> Any:
    """The tests' notes server and a prompt: every kind of target a span can name."""
    server = notes_server(gates)

    @server.prompt()
    def greeting(name: str) -> str:
        return f"Hello, {name}"

    return server


def from_sdk(span: Any) -> Emitted:
    events = tuple((event.name, dict(event.attributes)) for event in span.events)
    return Emitted(span.kind.name, span.name, dict(span.attributes), events, span.status.status_code.name)


def from_otlp(span: ReceivedSpan) -> Emitted:
    return Emitted(span.kind, span.name, span.attributes, tuple(span.events), span.status)


def mcp_spans(spans: list[Emitted]) -> list[Emitted]:
    """Request and notification spans (a task's INTERNAL span is not one the convention defines)."""
    return [span for span in spans if span.kind in ("SERVER", "CLIENT") and "mcp.method.name" in span.attributes]


async def drive(client: Any, gates: Gates) -> None:
    """ok, a tool's error, an unknown tool, a prompt, a caller's cancel and a client's timeout."""
    await client.call_tool("echo", {"text": "hi"})
    await client.call_tool("broken", {"text": "hi"})
    await client.call_tool("no_such_tool", {})
    await client.get_prompt("greeting", {"name": "Ada"})
    with pytest.raises(TimeoutError):
        await client.call_tool("slow", {"text": "y"}, timeout=0.05)
    await cancel_when(gates.started.wait, lambda: client.call_tool("slow", {"text": "x"}))
    gates.let_go()
    await client.ping()


async def test_the_convention_and_our_documentation_agree_on_what_is_ours() -> None:
    assert DEVIATIONS == EXPECTED_DEVIATIONS
    convention_names = set(CONVENTION["attributes"]) | set(CONVENTION["metrics"])
    assert OWN_NAMES.isdisjoint(convention_names)
    assert {"tool.outcome", "tool.cancel_reason", "tool.ghost_responses", "mcp.task.id"} <= OWN_NAMES


async def test_memory_streams_both_ends(captured) -> None:
    gates = Gates()
    async with sdk_client(served_in_memory(conformance_server(gates))) as client:
        await drive(client, gates)
    async with raw_session(conformance_server(Gates())) as peer:  # what no SDK client sends
        await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        await peer.cancel(1, "too late")
        await peer.call(2, "acme/invented", {})
        await peer.barrier("end")
    finished = captured.spans.get_finished_spans()
    spans = mcp_spans([from_sdk(span) for span in finished if span.instrumentation_scope.name == SCOPE])
    kinds = {(span.kind, span.attributes["mcp.method.name"]) for span in spans}
    assert {("CLIENT", "tools/call"), ("SERVER", "tools/call"), ("CLIENT", "prompts/get"),
            ("SERVER", "prompts/get"), ("SERVER", "notifications/cancelled")} <= kinds
    assert ("SERVER", "_OTHER") in kinds  # an invented method, refused: on 1.x, in the receive loop
    assert [difference for span in spans for difference in span_differences(span)] == []
    assert {span.instrumentation_scope.schema_url for span in finished
            if span.instrumentation_scope.name == SCOPE} == {SCHEMA_URL}

    differences, seen = [], set()
    data = captured.metrics.get_metrics_data()
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            if scope_metrics.scope.name != SCOPE:
                continue
            assert scope_metrics.scope.schema_url == SCHEMA_URL
            for metric in scope_metrics.metrics:
                instrument = {Histogram: "histogram", Sum: "counter"}[type(metric.data)]
                for point in metric.data.data_points:
                    seen.add(metric.name)
                    bounds = list(point.explicit_bounds) if instrument == "histogram" else None
                    differences += metric_differences(metric.name, instrument, metric.unit, bounds,
                                                      dict(point.attributes))
    assert differences == []
    assert {"mcp.client.operation.duration", "mcp.server.operation.duration", "mcp.client.session.duration",
            "mcp.server.session.duration"} <= seen


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
async def test_a_server_in_its_own_process(transport: str, sink: OtlpSink, tmp_path: Path) -> None:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    server = None
    if transport == "stdio":
        command, *args = instrumented_command(tmp_path)
        streams = stdio_client(StdioServerParameters(command=command, args=args,
                                                     env=exporter_environment(sink.endpoint)))
    else:
        server = HttpServer(sink.endpoint, tmp_path, transport)
        streams = http_streams(f"http://127.0.0.1:{server.port}/mcp")
    try:
        async with streams as (read, write), raw_peer_over(read, write) as peer:
            await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
            await peer.call(2, "tools/call", {"name": "broken", "arguments": {"text": "hi"}})
            await peer.call(3, "tools/call", {"name": "no_such_tool", "arguments": {}})
            await peer.cancel(3, "too late")
            await peer.barrier("end")
        await until(lambda: len(mcp_spans([from_otlp(s) for s in sink.server_spans(SCOPE)])) >= 4, seconds=30)
        await until(lambda: sink.latest_points("mcp.server.session.duration") != [], seconds=30)
    finally:
        if server is not None:
            server.stop()
    spans = mcp_spans([from_otlp(span) for span in sink.server_spans(SCOPE)])
    requests = [span for span in spans if "jsonrpc.request.id" in span.attributes]
    assert {span.attributes["network.transport"] for span in requests} == {"pipe" if transport == "stdio" else "tcp"}
    assert [difference for span in spans for difference in span_differences(span)] == []
    # OTLP points carry no unit or buckets here (the in-process test checks those): their attributes.
    differences = [
        difference
        for name in ("mcp.server.operation.duration", "mcp.server.session.duration", "tool.ghost_responses")
        for point in sink.latest_points(name)
        for difference in metric_differences(name, CONVENTION["metrics"].get(name, {}).get("instrument", ""),
                                             CONVENTION["metrics"].get(name, {}).get("unit", ""), None,
                                             point.attributes)
    ]
    assert differences == []


def test_the_checks_find_what_they_look_for() -> None:
    """Each rule fails a span or point that breaks it: a check that cannot fail proves nothing."""
    good = Emitted("SERVER", "tools/call echo", {"mcp.method.name": "tools/call", "jsonrpc.request.id": "1",
                                                 "gen_ai.operation.name": "execute_tool",
                                                 "gen_ai.tool.name": "echo", "tool.outcome": "ok"}, (), "UNSET")
    assert span_differences(good) == []
    broken = [
        Emitted("SERVER", "notifications/cancelled",
                {"mcp.method.name": "notifications/cancelled", "jsonrpc.request.id": "1"}, (), "UNSET"),
        Emitted("SERVER", "tools/call _OTHER", {**good.attributes}, (), "UNSET"),
        Emitted("SERVER", "tools/call echo", {**good.attributes, "mcp.cancel.reason": "x"}, (), "UNSET"),
        Emitted("SERVER", "tools/call echo", {**good.attributes, "tool.outcome": "failed"}, (), "ERROR"),
        Emitted("CLIENT", "tools/call echo", {**good.attributes, "error.type": "timeout"}, (), "UNSET"),
        Emitted("SERVER", "tools/call echo", {**good.attributes, "server.port": "80"}, (), "UNSET"),
        Emitted("SERVER", "tools/call echo",
                {**good.attributes, "mcp.protocol.version": "2026-07-28", "mcp.session.id": "s"}, (), "UNSET"),
        Emitted("INTERNAL", "tools/call echo", good.attributes, (), "UNSET"),
        Emitted("SERVER", "tools/call echo", good.attributes, (("mcp.request.cancelled", {}),), "UNSET"),
        Emitted("SERVER", "tools/call echo", good.attributes, (("tool.request_cancelled", {"reason": "x"}),), "UNSET"),
    ]
    assert [len(span_differences(span)) > 0 for span in broken] == [True] * len(broken)
    operation = {"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo"}
    assert metric_differences("mcp.server.operation.duration", "histogram", "s",
                              CONVENTION["buckets"], operation) == []
    assert metric_differences("mcp.server.operation.duration", "histogram", "ms", None, operation)
    assert metric_differences("mcp.server.operation.duration", "histogram", "s", [1, 2], operation)
    assert metric_differences("mcp.server.operation.duration", "histogram", "s", None,
                              {**operation, "jsonrpc.request.id": "1"})
    assert metric_differences("mcp.server.operation.duration", "histogram", "s", None,
                              {"mcp.method.name": "tools/call"})
    assert metric_differences("mcp.server.session.duration", "histogram", "s", None, {"network.transport": "pipe"})
    assert metric_differences("mcp.server.ghost_responses", "counter", "{response}", None, {})
