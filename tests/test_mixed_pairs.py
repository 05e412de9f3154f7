"""A client of one mcp line against a server of the other, each instrumented: one trace, agreeing outcomes.

The server runs under `opentelemetry-instrument` with the other line's Python, named by MCP_PEER_PYTHON
(.ci/run sets it: the newest release of the other line).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from examples.otlp_sink import OtlpSink, exporter_environment
from otel_mcp_cancel.hooks import client_transports
from tests.subprocess_servers import instrumented_command
from tests.support import MCP_MAJOR, cancel_when, until

pytestmark = pytest.mark.anyio

PEER_PYTHON = os.environ.get("MCP_PEER_PYTHON")


@pytest.fixture
def peer_python() -> str:
    if PEER_PYTHON is None:
        if os.environ.get("CI"):
            pytest.fail("MCP_PEER_PYTHON is not set; .ci/run sets it to the other mcp line's python")
        pytest.skip("set MCP_PEER_PYTHON to a python whose environment has the other mcp line")
    return PEER_PYTHON


def client_spans(captured) -> dict[str, Any]:
    return {s.name: s for s in captured.spans.get_finished_spans() if s.kind.name == "CLIENT"}


def server_spans(sink: OtlpSink) -> dict[str, Any]:
    return {s.name: s for s in sink.server_spans("otel_mcp_cancel")}


async def drive_with_a_2x_client(params: Any, vault: Path) -> None:
    from mcp import Client
    from mcp.client.stdio import stdio_client

    async with Client(stdio_client(params), mode="legacy") as client:
        await client.call_tool("echo", {"text": "hi"})
        await client.call_tool("broken", {"text": "hi"})
        started = lambda: client.call_tool("wait_started", {})  # noqa: E731
        await cancel_when(started, lambda: client.call_tool("shielded_write", {"name": "ghost.md"}))
        await client.send_ping()  # the server has read the courtesy cancel
        await client.call_tool("release", {})
        await until(lambda: (vault / "ghost.md").exists())


async def drive_with_a_1x_client(params: Any, vault: Path) -> None:
    from mcp import ClientSession, types
    from mcp.client.stdio import stdio_client

    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("echo", {"text": "hi"})
        await session.call_tool("broken", {"text": "hi"})
        write_id = session._request_id  # the id the shielded write will use

        async def started_then_cancelled() -> None:
            # A 1.x client sends no cancel of its own: send the one a caller would, then give up waiting.
            await session.call_tool("wait_started", {})
            cancel = types.CancelledNotification(
                method="notifications/cancelled",
                params=types.CancelledNotificationParams(requestId=write_id, reason="caller cancelled"),
            )
            await session.send_notification(types.ClientNotification(cancel))
            await session.send_ping()  # the server has read the cancel

        await cancel_when(started_then_cancelled, lambda: session.call_tool("shielded_write", {"name": "ghost.md"}))
        await session.call_tool("release", {})
        await until(lambda: (vault / "ghost.md").exists())


async def test_a_client_and_a_server_of_different_lines_agree(captured, sink: OtlpSink, tmp_path: Path, peer_python):
    from mcp.client.stdio import StdioServerParameters

    command, *args = instrumented_command(tmp_path, python=peer_python)
    params = StdioServerParameters(command=command, args=args, env=exporter_environment(sink.endpoint))
    drive = drive_with_a_2x_client if MCP_MAJOR == 2 else drive_with_a_1x_client
    await drive(params, tmp_path)
    await until(lambda: "tools/call shielded_write" in server_spans(sink), seconds=30)

    clients, servers = client_spans(captured), server_spans(sink)
    for name, outcome in (("tools/call echo", "ok"), ("tools/call broken", "failed")):
        assert clients[name].attributes["tool.outcome"] == servers[name].attributes["tool.outcome"] == outcome
    write = "tools/call shielded_write"
    assert clients[write].attributes["tool.outcome"] == servers[write].attributes["tool.outcome"] == "cancelled"
    assert [name for name, _ in servers[write].events] == ["tool.request_cancelled", "tool.ghost_response"]
    for name in ("tools/call echo", "tools/call broken", write):
        assert servers[name].trace_id == format(clients[name].context.trace_id, "032x")
        assert servers[name].parent_span_id == format(clients[name].context.span_id, "016x")
        assert clients[name].attributes["network.transport"] == "pipe"
    assert client_transports.open_count() == 0  # the transport closed: nothing of it is kept
