"""The server `benchmarks/crossings.py` sweeps a caller's give-up across: one tool, `write`, that waits
`delay` seconds and then appends a row (its side effect) to a file, served over streamable HTTP by uvicorn.

    python crossing_server.py ROWS_FILE PORT [json]

Run under `opentelemetry-instrument` for the plugin. Each row is `<key> <request id>`: the handler ran to its end.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer

rows = Path(sys.argv[1])
port = int(sys.argv[2])
json_response = sys.argv[3:] == ["json"]
server = MCPServer("crossings")


@server.tool(annotations={"destructiveHint": True})
async def write(key: str, delay: float, ctx: Context) -> str:
    await anyio.sleep(delay)
    with rows.open("a") as out:
        out.write(f"{key} {ctx.request_id}\n")
    return key


if __name__ == "__main__":
    server.run("streamable-http", port=port, host="127.0.0.1", json_response=json_response)
