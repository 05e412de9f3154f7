"""The "signal" cancel mode of mcp 2.3's dispatcher (`JSONRPCDispatcher(..., peer_cancel_mode="signal")`, served
with `serve_connection`): a peer's cancel only sets the request's `cancel_requested`; the handler is not interrupted
and runs to its end, and the dispatcher then writes nothing for it. The handler's context (`ServerRequestContext`)
does not expose the signal, so every cancelled call whose handler ends is a ghost: its side effects happened and its
answer was suppressed. The span says `cancelled` with the ghost's facts, exactly as in interrupt mode for a shielded
handler, and the counter counts it; a handler that raised is a ghost whose handler outcome is `failed`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp.server import Server
from mcp.server.connection import Connection
from mcp.server.runner import serve_connection
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.memory import create_client_server_memory_streams
from mcp_types import CallToolResult, TextContent
from opentelemetry.trace import StatusCode

from tests.raw_peer import RawPeer

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def served_in_signal_mode(server: Server) -> AsyncIterator[RawPeer]:
    """`server` behind a dispatcher in signal mode, as `serve_loop` builds one otherwise; an initialized raw peer."""
    async with create_client_server_memory_streams() as ((client_read, client_write), (server_read, server_write)):
        async with anyio.create_task_group() as tg:
            dispatcher = JSONRPCDispatcher(server_read, server_write, peer_cancel_mode="signal",
                                           inline_methods=frozenset({"initialize"}))

            async def serve() -> None:
                async with server.lifespan(server) as state:
                    await serve_connection(server, dispatcher, connection=Connection.for_loop(dispatcher),
                                           lifespan_state=state, init_options=server.create_initialization_options())

            tg.start_soon(serve)
            peer = RawPeer(client_read, client_write)
            tg.start_soon(peer.pump)
            await peer.initialize()
            yield peer
            tg.cancel_scope.cancel()


@pytest.mark.parametrize(("raises", "handler_outcome"), [(False, "ok"), (True, "failed")])
async def test_a_cancel_in_signal_mode_leaves_the_handler_running_and_its_end_is_a_ghost(
    captured, raises: bool, handler_outcome: str
) -> None:
    started, release, finished = anyio.Event(), anyio.Event(), []

    async def call_tool(ctx: Any, params: Any) -> CallToolResult:
        started.set()
        await release.wait()  # not interrupted by the cancel
        finished.append(params.name)
        if raises:
            raise RuntimeError("failed after its side effect")
        return CallToolResult(content=[TextContent(type="text", text="committed")])

    async with served_in_signal_mode(Server("signal", on_call_tool=call_tool)) as peer:
        await peer.request(5, "tools/call", {"name": "commit", "arguments": {}})
        await started.wait()
        await peer.cancel(5, "stop")
        await peer.barrier("cancel-read")  # the server has read the cancel: the handler holds on
        release.set()
        await peer.barrier("handler-ended")
        assert peer.answers(5) == []  # the dispatcher wrote nothing
    assert finished == ["commit"]
    span = captured.server_span("tools/call")
    ghost = {"tool.handler_outcome": handler_outcome, "tool.ghost_risk": "unknown", "tool.ghost_kind": "suppressed"}
    assert {key: span.attributes.get(key) for key in ("tool.outcome", "error.type", *ghost)} == {
        "tool.outcome": "cancelled", "error.type": None, **ghost}
    assert [(event.name, dict(event.attributes)) for event in span.events if event.name != "exception"] == [
        ("tool.request_cancelled", {"tool.cancel_message": "stop"}), ("tool.ghost_response", ghost)]
    assert span.status.status_code is StatusCode.UNSET
    (counted,) = captured.points("tool.ghost_responses")
    # A low-level server that never listed its tools: the name folds, as on every metric.
    assert (dict(counted.attributes), counted.value) == (
        {"mcp.method.name": "tools/call", "gen_ai.tool.name": "_OTHER", **ghost}, 1)
    (point,) = [p for p in captured.points("mcp.server.operation.duration")
                if p.attributes.get("mcp.method.name") == "tools/call"]
    assert (point.attributes["tool.outcome"], point.count) == ("cancelled", 1)
