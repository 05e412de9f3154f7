"""An MCP client process as an agent runs one: the SDK's client under `opentelemetry-instrument`, no
telemetry code of its own, making the calls a backends test asks for against the gated server
(tests/gated_server.py) and exiting. The test knows what it asked for: that is its ground truth.

Usage: python -m tests.load_client PLAN, PLAN a JSON list of sessions, each
  {"url": "http://…/mcp"} or {"stdio": [command…], "env": {…}}, with "steps", each one of
  {"call": tool, "arguments": {…}, "times": n, "concurrency": c}  n calls, c at a time;
  {"time_out": tool, "times": n}                                  n calls its own 50 ms timeout ends;
  {"ghost": name, "vault": dir, "release_when": path}  a write of `name` its caller cancels once begun,
      finished after the server read the cancel (and, if given, once the test made `path`): a ghost, its
      file in `vault`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.sdk_client import SdkClient, sdk_client
from tests.subprocess_servers import http_streams


@asynccontextmanager
async def connected(session: dict[str, Any]) -> AsyncIterator[SdkClient]:
    if "url" in session:
        transport = http_streams(session["url"])
    else:
        command, *args = session["stdio"]
        transport = stdio_client(StdioServerParameters(command=command, args=args, env=session["env"]))
    async with sdk_client(transport) as client:
        yield client


async def calls(client: SdkClient, tool: str, arguments: dict[str, Any], times: int, concurrency: int) -> None:
    turns = iter(range(times))

    async def worker() -> None:
        for _ in turns:
            await client.call_tool(tool, arguments)

    async with anyio.create_task_group() as workers:
        for _ in range(concurrency):
            workers.start_soon(worker)


async def time_outs(client: SdkClient, tool: str, times: int) -> None:
    for _ in range(times):
        try:
            await client.call_tool(tool, {}, timeout=0.05)
        except TimeoutError:
            continue
        raise AssertionError(f"{tool} answered within its timeout")


async def ghost(client: SdkClient, name: str, vault: Path, release_when: Path | None) -> None:
    async with anyio.create_task_group() as caller:
        caller.start_soon(client.call_tool, "shielded_write", {"name": name})
        await client.call_tool("wait_started", {})
        caller.cancel_scope.cancel()
    with anyio.fail_after(300):
        while "read" not in str(await client.call_tool("cancel_read", {"tool": "shielded_write"})):
            await anyio.sleep(0.01)
        while release_when is not None and not release_when.exists():
            await anyio.sleep(0.01)
        await client.call_tool("release", {})
        while not (vault / name).exists():
            await anyio.sleep(0.01)


async def main(plan: list[dict[str, Any]]) -> None:
    for session in plan:
        async with connected(session) as client:
            for step in session["steps"]:
                if "call" in step:
                    await calls(client, step["call"], step.get("arguments", {}), step.get("times", 1),
                                step.get("concurrency", 1))
                elif "time_out" in step:
                    await time_outs(client, step["time_out"], step["times"])
                else:
                    release_when = step.get("release_when")
                    await ghost(client, step["ghost"], Path(step["vault"]), release_when and Path(release_when))


if __name__ == "__main__":
    anyio.run(main, json.loads(sys.argv[1]))
