"""`fastmcp.Client` with the plugin: FastMCP's CLIENT span is the request's one CLIENT span, with FastMCP's
details and our verdict; a FastMCP span under which no request goes stays FastMCP's; FastMCP's spans go to
the provider given to instrument(); the transports FastMCP imported before instrument() are traced.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from examples.otlp_sink import OtlpSink
from tests.conftest import SPANS, instrumentation
from tests.frameworks import FASTMCP_MAJOR, FRAMEWORKS
from tests.servers import Gates, notes_server
from tests.subprocess_servers import GATED_SERVER, HttpServer
from tests.test_fastmcp import exceptions

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(FASTMCP_MAJOR is None or FASTMCP_MAJOR < 3, reason="FastMCP 3.x and 4.x make client spans"),
]

SCOPE = "otel_mcp_cancel"
FASTMCP = FRAMEWORKS[-1]


def tool_calls(spans: Any) -> list[Any]:
    calls = [s for s in spans if s.kind is SpanKind.CLIENT and s.attributes.get("mcp.method.name") == "tools/call"]
    return sorted(calls, key=lambda span: span.start_time)


def raised_type(error: BaseException) -> str:
    """How an exception event names what the caller caught: the end of its cause chain, module-qualified."""
    while error.__cause__ is not None:
        error = error.__cause__
    kind = type(error)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


async def test_fastmcps_client_span_is_the_requests_span_with_its_details_and_our_verdict(captured) -> None:
    from fastmcp import Client

    gates = Gates()
    async with Client(notes_server(gates, FASTMCP)) as client:
        await client.call_tool("echo", {"text": "hi"})
        with pytest.raises(Exception):  # noqa: B017 - FastMCP's own error for an isError result, after its span
            await client.call_tool("broken", {"text": "hi"})
        with pytest.raises(Exception) as timed_out:  # noqa: B017 - each line raises its own timeout error
            await client.call_tool("slow", {"text": "hi"}, timeout=0.05)
        gates.let_go()
    echo, broken, slow = tool_calls(captured.spans.get_finished_spans())  # one CLIENT span per call
    assert {s.instrumentation_scope.name for s in captured.of_kind(SpanKind.CLIENT)} == {SCOPE}
    for span, tool in ((echo, "echo"), (broken, "broken"), (slow, "slow")):
        assert span.name == f"tools/call {tool}"
        assert span.attributes["fastmcp.component.key"] == tool  # FastMCP's, on our span
        assert span.attributes["gen_ai.tool.name"] == tool
    assert (echo.attributes["tool.outcome"], echo.status.status_code, exceptions(echo)) == ("ok", StatusCode.UNSET, [])
    # The verdict is ours: FastMCP's error.type and status do not overwrite it; an exception it records is one
    # bounded event.
    assert (broken.attributes["tool.outcome"], broken.attributes["error.type"]) == ("failed", "tool_error")
    assert (broken.status.status_code, exceptions(broken)) == (StatusCode.ERROR, [])
    assert (slow.attributes["tool.outcome"], slow.attributes["error.type"]) == ("cancelled", "timeout")
    assert (slow.attributes["tool.cancel_reason"], slow.status.status_code) == ("timeout", StatusCode.UNSET)
    assert exceptions(slow) == [(raised_type(timed_out.value), None)]
    # The server's span is the child of the one CLIENT span.
    (served,) = [s for s in captured.request_spans() if s.name == "tools/call echo"]
    assert served.parent.span_id == echo.context.span_id


async def test_a_fastmcp_client_span_with_no_request_under_it_stays_fastmcps(captured) -> None:
    from fastmcp.client.telemetry import client_span

    with pytest.raises(RuntimeError):
        with client_span("reconcile", "custom/reconcile", "ledger"):
            raise RuntimeError("out of balance")
    (span,) = [s for s in captured.spans.get_finished_spans() if s.name == "reconcile"]
    assert span.kind is SpanKind.CLIENT and span.status.status_code is StatusCode.ERROR
    assert (span.attributes["mcp.method.name"], span.attributes["fastmcp.component.key"]) == (
        "custom/reconcile", "ledger")
    assert "tool.outcome" not in span.attributes
    assert [event.attributes["exception.type"] for event in span.events if event.name == "exception"][:1] == [
        "RuntimeError"]


async def test_fastmcps_spans_go_to_the_provider_given_to_instrument() -> None:
    """A mounted server's call: FastMCP's own spans (the delegation) and ours, in one provider, one trace."""
    from fastmcp import Client

    given = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(given))
    SPANS.clear()
    parent, child = FASTMCP.make("parent"), notes_server(Gates(), FASTMCP)
    parent.mount(child, namespace="notes") if FASTMCP_MAJOR >= 4 else parent.mount(child, prefix="notes")
    with instrumentation(tracer_provider=provider,
                         meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()])):
        async with Client(parent) as client:
            await client.call_tool("notes_echo", {"text": "hi"})
    assert SPANS.get_finished_spans() == ()  # nothing went to the global provider
    (call,) = tool_calls(given.get_finished_spans())
    trace_of_call = [s for s in given.get_finished_spans() if s.context.trace_id == call.context.trace_id]
    assert call.instrumentation_scope.name == SCOPE
    assert {s.instrumentation_scope.name for s in trace_of_call} == {SCOPE, "fastmcp"}


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
async def test_fastmcp_imported_before_instrument_still_has_its_transports_traced(
    captured, sink: OtlpSink, tmp_path: Path, transport: str
) -> None:
    """This module imported FastMCP (and its transports, binding the SDK's helpers by name) at collection,
    before the fixture's instrument()."""
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport

    server = None
    if transport == "stdio":
        target: Any = StdioTransport(sys.executable, [str(GATED_SERVER), str(tmp_path)],
                                     env={**os.environ, "GATED_FRAMEWORK": "fastmcp"})
    else:
        server = HttpServer(sink.endpoint, tmp_path, "streamable-http", GATED_FRAMEWORK="fastmcp")
        target = f"http://127.0.0.1:{server.port}/mcp"
    try:
        async with Client(target) as client:
            await client.call_tool("echo", {"text": "hi"})
    finally:
        if server is not None:
            server.stop()
    (call,) = tool_calls(captured.spans.get_finished_spans())
    if transport == "stdio":
        assert call.attributes["network.transport"] == "pipe"
    else:
        assert call.attributes["network.transport"] == "tcp"
        assert (call.attributes["server.address"], call.attributes["server.port"]) == ("127.0.0.1", server.port)
        # Sessions, where the protocol version spoken has them.
        assert ("mcp.session.id" in call.attributes) is (call.attributes["mcp.protocol.version"] < "2026-07-28")

