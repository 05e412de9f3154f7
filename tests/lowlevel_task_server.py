"""A low-level mcp 1.x server over stdio whose one tool, `hold`, runs as a task on the SDK's own engine and works
until the process ends. Its work says it started by writing the process's id to the file its one argument names.

Usage: python lowlevel_task_server.py STARTED_FILE
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

started = Path(sys.argv[1])
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # the engine is deprecated in 1.x, and used
    server = Server("tasks")
    server.experimental.enable_tasks()


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    return [types.Tool(name="hold", inputSchema={"type": "object"}, annotations=types.ToolAnnotations(
        destructiveHint=True), execution=types.ToolExecution(taskSupport="optional"))]


@server.call_tool()
async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
    async def work(task: Any) -> types.CallToolResult:
        started.write_text(str(os.getpid()))
        await anyio.sleep_forever()

    return await server.request_context.experimental.run_task(work)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
