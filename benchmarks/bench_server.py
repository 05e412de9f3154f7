"""The benchmarked server: one trivial tool, served over stdio, under one telemetry configuration.

    python bench_server.py CONFIG OTLP_ENDPOINT

CONFIG is one of benchmarks.configs.CONFIGS. Runs with either mcp line (FastMCP on 1.x).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from configs import apply  # noqa: E402

try:
    from mcp.server.mcpserver import MCPServer as HighLevelServer
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as HighLevelServer

if __name__ == "__main__":
    apply(sys.argv[1], sys.argv[2])
    server = HighLevelServer("bench")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    server.run()
