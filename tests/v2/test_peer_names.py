"""mcp 2.x on the 2026-07-28 revision, which has no `initialize`: each request names its client in its `_meta`,
and each result its server, and every span says who its peer is; the metrics carry the peer's name."""

from __future__ import annotations

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import Implementation

pytestmark = pytest.mark.anyio


async def test_each_request_and_result_names_its_peer(captured) -> None:
    server = MCPServer("notes-service", version="3.1")

    @server.tool()
    def echo(text: str) -> str:
        return text

    async with Client(server, client_info=Implementation(name="ide-host", version="9.2")) as client:
        assert client.protocol_version >= "2026-07-28"
        await client.call_tool("echo", {"text": "hi"})
    sent, served = captured.client_and_server("tools/call echo")
    assert {k: v for k, v in served.attributes.items() if k.startswith("mcp.client.")} == {
        "mcp.client.name": "ide-host", "mcp.client.version": "9.2"}
    assert {k: v for k, v in sent.attributes.items() if k.startswith("mcp.server.")} == {
        "mcp.server.name": "notes-service", "mcp.server.version": "3.1"}
    (served_point,) = [p for p in captured.points("mcp.server.operation.duration")
                       if p.attributes.get("gen_ai.tool.name") == "echo"]
    (sent_point,) = [p for p in captured.points("mcp.client.operation.duration")
                     if p.attributes.get("gen_ai.tool.name") == "echo"]
    assert served_point.attributes["mcp.client.name"] == "ide-host"
    assert "mcp.client.version" not in served_point.attributes  # the name alone: a bounded dimension
    assert sent_point.attributes["mcp.server.name"] == "notes-service"
