"""An MCP server as an ASGI app, for `uvicorn tests.workers_app:app --workers N`: stateless streamable HTTP
(any worker answers any request) with JSON answers, and no telemetry code."""

from __future__ import annotations

try:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("workers")
    app = server.streamable_http_app(stateless_http=True, json_response=True)
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP

    server = FastMCP("workers", stateless_http=True, json_response=True)
    app = server.streamable_http_app()


@server.tool()
def echo(text: str) -> str:
    return text
