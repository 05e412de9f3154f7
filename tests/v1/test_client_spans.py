"""mcp 1.x clients: one CLIENT span per request, `traceparent` injected so the server joins the trace."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import anyio
import pytest
import wrapt
from mcp import types
from mcp.shared.exceptions import McpError
from mcp.shared.memory import create_connected_server_and_client_session
from mcp.shared.session import BaseSession
from opentelemetry.instrumentation.utils import unwrap
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.trace import SpanKind

from otel_mcp_cancel.user_hooks import McpRequestInfo
from tests.conftest import SPANS, Captured, instrumentation, instrumented
from tests.raw_peer import lowlevel_of
from tests.servers import Gates, notes_server
from tests.support import until

pytestmark = pytest.mark.anyio


async def test_ok_and_failed_agree_and_share_one_trace(captured) -> None:
    async with create_connected_server_and_client_session(lowlevel_of(notes_server(Gates()))) as session:
        await session.call_tool("echo", {"text": "a"})
        await session.call_tool("broken", {"text": "b"})
    for name, outcome in (("tools/call echo", "ok"), ("tools/call broken", "failed")):
        client_span, server_span = captured.client_and_server(name)
        assert client_span.attributes["tool.outcome"] == server_span.attributes["tool.outcome"] == outcome
        assert server_span.context.trace_id == client_span.context.trace_id
        assert server_span.parent.span_id == client_span.context.span_id
    client_span, server_span = captured.client_and_server("tools/call echo")
    assert client_span.attributes["jsonrpc.request.id"] == server_span.attributes["jsonrpc.request.id"]
    points = [p for p in captured.points("mcp.client.operation.duration") if "tool.outcome" in p.attributes]
    assert {(p.attributes["gen_ai.tool.name"], p.attributes["tool.outcome"]) for p in points} == {
        ("echo", "ok"),
        ("broken", "failed"),
    }


async def test_the_servers_cancel_acknowledgement_is_a_cancel_on_the_client_too(captured) -> None:
    """A 1.x client never sends a cancel itself; when one is sent, 1.x servers answer with an acknowledgement."""
    gates = Gates()
    async with create_connected_server_and_client_session(lowlevel_of(notes_server(gates))) as session:
        request_id = session._request_id  # the id the next call will use
        async with anyio.create_task_group() as tg:

            async def cancel_once_started() -> None:
                await gates.started.wait()
                cancel = types.CancelledNotification(
                    method="notifications/cancelled",
                    params=types.CancelledNotificationParams(requestId=request_id, reason="user pressed stop"),
                )
                await session.send_notification(types.ClientNotification(cancel))

            tg.start_soon(cancel_once_started)
            with pytest.raises(McpError, match="Request cancelled"):
                await session.call_tool("slow", {"text": "x"})
    client_span, server_span = captured.client_and_server("tools/call slow")
    assert client_span.attributes["tool.outcome"] == server_span.attributes["tool.outcome"] == "cancelled"
    assert client_span.status.status_code.name == "UNSET" and "error.type" not in client_span.attributes


async def test_a_read_timeout_is_cancelled_on_the_client_and_unknown_to_the_server(captured) -> None:
    """1.x clients send no cancel on timeout: the server finishes and answers; the answer is dropped."""
    gates = Gates()
    async with create_connected_server_and_client_session(lowlevel_of(notes_server(gates))) as session:
        with pytest.raises(McpError):
            await session.call_tool("slow", {"text": "x"}, read_timeout_seconds=timedelta(seconds=0.05))
        gates.let_go()
        await until(lambda: any(s.name == "tools/call slow" for s in captured.of_kind(SpanKind.SERVER)))
    client_span, server_span = captured.client_and_server("tools/call slow")
    assert client_span.attributes["tool.outcome"] == "cancelled"
    assert [(e.name, dict(e.attributes)) for e in client_span.events] == [
        ("tool.request_cancelled", {"tool.cancel_reason": "timeout"})
    ]
    assert server_span.attributes["tool.outcome"] == "ok"


@pytest.fixture
def courtesy_cancel(monkeypatch) -> Iterator[Captured]:
    with instrumented(monkeypatch, OTEL_PYTHON_MCP_CANCEL_COURTESY_CANCEL="on") as telemetry:
        yield telemetry


async def test_with_courtesy_cancels_a_timeout_is_cancelled_on_both_sides(courtesy_cancel) -> None:
    gates = Gates()
    async with create_connected_server_and_client_session(lowlevel_of(notes_server(gates))) as session:
        with pytest.raises(McpError):
            await session.call_tool("slow", {"text": "x"}, read_timeout_seconds=timedelta(seconds=0.05))
        await session.send_ping()  # the server has read the courtesy cancel
        await until(lambda: any(s.name == "tools/call slow" for s in courtesy_cancel.of_kind(SpanKind.SERVER)))
    client_span, server_span = courtesy_cancel.client_and_server("tools/call slow")
    assert client_span.attributes["tool.outcome"] == server_span.attributes["tool.outcome"] == "cancelled"
    assert [(e.name, dict(e.attributes)) for e in server_span.events] == [
        ("tool.request_cancelled", {"tool.cancel_message": "timed out"})
    ]


async def test_the_wire_carries_the_callers_meta_its_progress_token_and_the_trace_context() -> None:
    """1.x has no place to inject: the request's wire form gets `traceparent` beside what the caller and the
    SDK put in `_meta`, while the client's span keeps the params the caller gave."""
    seen: dict[str, Any] = {}

    def request_hook(span: Any, request: McpRequestInfo) -> None:
        if request.method == "tools/call":
            seen[request.side] = request.params

    meta = types.RequestParams.Meta.model_validate({"tenant": "acme"})
    params = types.CallToolRequestParams(name="echo", arguments={"text": "a"}, _meta=meta)
    call = types.ClientRequest(types.CallToolRequest(method="tools/call", params=params))
    SPANS.clear()
    with instrumentation(meter_provider=MeterProvider(), request_hook=request_hook):
        async with create_connected_server_and_client_session(lowlevel_of(notes_server(Gates()))) as session:
            await session.send_request(call, types.CallToolResult, progress_callback=_ignore_progress)
    (client,) = [s for s in SPANS.get_finished_spans() if s.kind is SpanKind.CLIENT and s.name == "tools/call echo"]
    traceparent = f"00-{client.context.trace_id:032x}-{client.context.span_id:016x}-{client.context.trace_flags:02x}"
    request_id = int(client.attributes["jsonrpc.request.id"])  # 1.x's progress token for a request is its id
    assert seen["client"] == {"name": "echo", "arguments": {"text": "a"}, "_meta": {"tenant": "acme"}}
    assert seen["server"] == {
        "name": "echo",
        "arguments": {"text": "a"},
        "_meta": {"tenant": "acme", "traceparent": traceparent, "progressToken": request_id},
    }
    assert call.root.params.meta is meta and meta.model_dump() == {"progressToken": None, "tenant": "acme"}


async def _ignore_progress(progress: float, total: float | None, message: str | None = None) -> None:
    return None


async def test_a_hook_inside_ours_that_changes_the_request_is_not_undone() -> None:
    """Another instrumentation wrapped before ours sees our traced request and may set `_meta` on it; what
    it set goes on the wire beside our trace context."""
    seen: list[Any] = []

    async def tagging(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        request = args[0]
        if isinstance(request.root, types.CallToolRequest):
            request.root.params.meta = types.RequestParams.Meta.model_validate({"tagged": "yes"})
        return await wrapped(*args, **kwargs)

    def request_hook(span: Any, request: McpRequestInfo) -> None:
        if request.side == "server" and request.method == "tools/call":
            seen.append(request.params["_meta"])

    wrapt.wrap_function_wrapper("mcp.shared.session", "BaseSession.send_request", tagging)
    try:
        with instrumentation(meter_provider=MeterProvider(), request_hook=request_hook):
            async with create_connected_server_and_client_session(lowlevel_of(notes_server(Gates()))) as session:
                await session.call_tool("echo", {"text": "a"})
    finally:
        unwrap(BaseSession, "send_request")
    ((meta),) = seen
    assert meta["tagged"] == "yes" and meta["traceparent"].startswith("00-")
