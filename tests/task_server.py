"""A standalone FastMCP server whose tools run as tasks, with no telemetry code: run under
`opentelemetry-instrument`. Its engine is fastmcp-tasks where that is installed (FastMCP 4), else FastMCP
2.x's own `task=True`, both on Docket's in-process memory backend (fastmcp-tasks: or the Docket URL in
TASK_SERVER_DOCKET_URL). Its `commit` tool writes a file and returns at once; `hold` works until the process
ends. SIGTERM ends it as SIGINT does, through the interpreter's exit (uvicorn re-raises the signal after its
graceful stop; unhandled, SIGTERM would kill the process before any exit hook ran): docs/operations.md's advice
for servers run under a supervisor.

Usage: python task_server.py VAULT_DIR [http PORT]   (stdio without a port)
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from pathlib import Path

import anyio
from fastmcp import FastMCP

vault = Path(sys.argv[1])
server = FastMCP("tasks")
if importlib.util.find_spec("fastmcp_tasks") is not None:
    from fastmcp_tasks import TasksExtension

    server.add_extension(TasksExtension(url=os.environ.get("TASK_SERVER_DOCKET_URL", "memory://")))


@server.tool(task=True, annotations={"destructiveHint": True})
async def commit(path: str) -> str:
    (vault / path).write_text("committed")
    return f"committed {path}"


@server.tool(task=True, annotations={"destructiveHint": True})
async def hold(path: str) -> str:
    """Works until the process ends; says it started by writing the process id to `path`."""
    (vault / path).write_text(str(os.getpid()))
    await anyio.sleep_forever()
    return "never"


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if sys.argv[2:3] == ["http"]:
        server.run(transport="http", host="127.0.0.1", port=int(sys.argv[3]))
    else:
        server.run()
