"""A standalone FastMCP 2.x server whose `commit` tool runs as a task (`task=True`, in Docket's in-process
memory backend), with no telemetry code: run over stdio under `opentelemetry-instrument`. Its work writes a
file and returns at once.

Usage: python task_server.py VAULT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from fastmcp import FastMCP

vault = Path(sys.argv[1])
server = FastMCP("tasks")


@server.tool(task=True, annotations={"destructiveHint": True})
async def commit(path: str) -> str:
    (vault / path).write_text("committed")
    return f"committed {path}"


if __name__ == "__main__":
    server.run()
