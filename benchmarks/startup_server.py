"""The server benchmarks/startup.py starts: one tool, over stdio, on the SDK's own high-level server (FastMCP on
mcp 1.x, MCPServer on 2.x), or standalone FastMCP when STARTUP_FRAMEWORK is `fastmcp`, with no telemetry code."""

from __future__ import annotations

import os

if os.environ.get("STARTUP_FRAMEWORK") == "fastmcp":
    from fastmcp import FastMCP as Server
else:
    try:
        from mcp.server.mcpserver import MCPServer as Server
    except ImportError:  # mcp 1.x
        from mcp.server.fastmcp import FastMCP as Server

server = Server("startup")


@server.tool()
def echo(text: str) -> str:
    return text


if __name__ == "__main__":
    server.run()
