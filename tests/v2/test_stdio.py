"""An unchanged MCPServer in a subprocess under `opentelemetry-instrument`, exporting OTLP/HTTP to a real receiver."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from examples.otlp_sink import OtlpSink, exporter_environment
from tests.conftest import is_request_span
from tests.subprocess_servers import instrumented_command
from tests.support import cancel_when, until

pytestmark = pytest.mark.anyio

SCOPE = "otel_mcp_cancel"


def instrumented_server(sink: OtlpSink, vault: Path, **extra_env: str) -> StdioServerParameters:
    command, *args = instrumented_command(vault)
    return StdioServerParameters(command=command, args=args, env={**exporter_environment(sink.endpoint), **extra_env})


def by_name(sink: OtlpSink) -> dict[str, list]:
    spans: dict[str, list] = {}
    for span in sink.server_spans(SCOPE):
        spans.setdefault(span.name, []).append(span)
    return spans


async def test_every_outcome_and_a_ghost_over_stdio(sink: OtlpSink, tmp_path: Path) -> None:
    async with Client(stdio_client(instrumented_server(sink, tmp_path)), mode="legacy") as client:
        await client.call_tool("echo", {"text": "hi"})
        await client.call_tool("broken", {"text": "hi"})
        await client.call_tool("no_such_tool", {})
        await cancel_when(
            lambda: client.call_tool("wait_started", {}), lambda: client.call_tool("sync_write", {"name": "ghost.md"})
        )
        await client.send_ping()  # the server has read the cancel
        await client.call_tool("release", {})
        # Its span is exported as its handler ends: the caller is still there, so the ghost is on it (a caller
        # that left first would have its call concluded then, and the ghost under it: tests/test_shutdown.py).
        await until(lambda: "tools/call sync_write" in by_name(sink))
    await until(lambda: sink.latest_points("tool.ghost_responses") != [])

    spans = by_name(sink)
    outcomes = {name: [s.attributes.get("tool.outcome") for s in found] for name, found in spans.items()}
    assert outcomes["tools/call echo"] == ["ok"]
    assert outcomes["tools/call broken"] == ["failed"]
    assert outcomes["tools/call"] == ["failed"]
    assert outcomes["tools/call sync_write"] == ["cancelled"]
    (ghost,) = spans["tools/call sync_write"]
    assert ghost.events == [
        ("tool.request_cancelled", {"tool.cancel_message": "caller cancelled"}),
        ("tool.ghost_response", {"tool.handler_outcome": "ok", "tool.ghost_risk": "unknown",
                                 "tool.ghost_kind": "suppressed"}),
    ]
    assert ghost.status == "UNSET"
    assert ghost.attributes["network.transport"] == "pipe"
    assert spans["tools/call broken"][0].status == "ERROR"
    assert spans["tools/call broken"][0].attributes["error.type"] == "tool_error"

    # Exactly one SERVER span per request: ours, never the SDK's as well.
    request_spans = [s for s in sink.server_spans() if is_request_span(s)]
    assert {s.scope for s in request_spans} == {SCOPE}
    ids = [s.attributes["jsonrpc.request.id"] for s in request_spans]
    assert len(ids) == len(set(ids))

    # One string end to end: the value on the span is the value on the metric.
    durations = {
        (p.attributes.get("gen_ai.tool.name"), p.attributes.get("tool.outcome")): p.value
        for p in sink.latest_points("mcp.server.operation.duration")
        if p.attributes.get("mcp.method.name") == "tools/call"
    }
    for span in sink.server_spans(SCOPE):
        if span.attributes.get("mcp.method.name") == "tools/call":
            tool = span.attributes.get("gen_ai.tool.name")
            metric_tool = tool if span.name != "tools/call" else "_OTHER"
            assert (metric_tool, span.attributes["tool.outcome"]) in durations
    assert durations[("sync_write", "cancelled")] == 1
    assert durations[("_OTHER", "failed")] == 1
    (ghosts,) = sink.latest_points("tool.ghost_responses")
    assert ghosts.attributes == {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "sync_write",
        "tool.handler_outcome": "ok",
        "tool.ghost_risk": "unknown", "tool.ghost_kind": "suppressed",
    }
    assert ghosts.value == 1


async def test_modern_protocol_over_stdio(sink: OtlpSink, tmp_path: Path) -> None:
    async with Client(stdio_client(instrumented_server(sink, tmp_path))) as client:
        await client.call_tool("echo", {"text": "hi"})
        await client.call_tool("broken", {"text": "hi"})
    await until(lambda: "tools/call broken" in by_name(sink))
    spans = by_name(sink)
    (echo,) = spans["tools/call echo"]
    assert echo.attributes["tool.outcome"] == "ok"
    assert echo.attributes["mcp.protocol.version"] == "2026-07-28"
    assert spans["tools/call broken"][0].attributes["tool.outcome"] == "failed"


async def test_disabled_by_otel_python_disabled_instrumentations(sink: OtlpSink, tmp_path: Path) -> None:
    params = instrumented_server(sink, tmp_path, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="mcp_cancel")
    async with Client(stdio_client(params), mode="legacy") as client:
        await client.call_tool("echo", {"text": "hi"})
    await until(lambda: any(s.name == "tools/call echo" for s in sink.server_spans()))
    assert sink.server_spans(SCOPE) == []
    # The SDK's own span is what remains, without an outcome.
    (echo,) = [s for s in sink.server_spans() if s.name == "tools/call echo"]
    assert echo.scope == "mcp-python-sdk" and "tool.outcome" not in echo.attributes
