"""Agent frameworks as MCP clients, through their own client objects and tool-calling path (no model): the
plugin on both ends, the server an unchanged one in a subprocess under `opentelemetry-instrument`.

- pydantic-ai's `MCPToolset` (over `fastmcp.Client`, FastMCP 3.x/4.x), stdio;
- openai-agents' `MCPServerStdio` (over the SDK's `ClientSession`), stdio;
- langchain-mcp-adapters' `MultiServerMCPClient` (a session per tool call, mcp 1.x), streamable HTTP: a
  cancelled call's session is torn down, and no cancel is sent: its caller hung up.

Each: a call that succeeds, one whose tool raises, one the framework's own timeout gives up on (where the
framework has one per request), and one its caller cancels after the tool's write began and before it
finished: exactly one CLIENT span per call with our verdict, the server's spans in the same traces, and the
cancelled write's ghost reported exactly once. CI installs each framework in the environment of the line it
runs on (see .ci/run); elsewhere its test is skipped with its name.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.trace import SpanKind

from examples.otlp_sink import OtlpSink, exporter_environment
from tests.conftest import instrumented
from tests.subprocess_servers import HttpServer, instrumented_command
from tests.support import MCP_MAJOR, until

pytestmark = pytest.mark.anyio

SCOPE = "otel_mcp_cancel"
PEER_PYTHON = os.environ.get("MCP_PEER_PYTHON")
GHOST = "shielded_write"


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


Call = Callable[[str, dict[str, Any]], Awaitable[Any]]


@asynccontextmanager
async def pydantic_ai_calls(sink: OtlpSink, vault: Path) -> AsyncIterator[tuple[Call, Callable[[], Awaitable[Any]]]]:
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai.mcp import MCPToolset

    command, *args = instrumented_command(vault)
    toolset = MCPToolset(StdioTransport(command, args, env={**os.environ, **exporter_environment(sink.endpoint)}),
                         tool_error_behavior="error", read_timeout=3)
    async with toolset:
        yield toolset.direct_call_tool, toolset.list_tools


@asynccontextmanager
async def openai_agents_calls(sink: OtlpSink, vault: Path) -> AsyncIterator[tuple[Call, Callable[[], Awaitable[Any]]]]:
    from agents.mcp import MCPServerStdio

    command, *args = instrumented_command(vault)
    params = {"command": command, "args": args, "env": {**os.environ, **exporter_environment(sink.endpoint)}}
    async with MCPServerStdio(params, client_session_timeout_seconds=3) as server:
        yield server.call_tool, server.list_tools


@asynccontextmanager
async def langchain_calls(sink: OtlpSink, vault: Path, server_python: str = sys.executable
                          ) -> AsyncIterator[tuple[Call, Callable[[], Awaitable[Any]]]]:
    from langchain_mcp_adapters.client import MultiServerMCPClient

    server = HttpServer(sink.endpoint, vault, "streamable-http", python=server_python)
    try:
        client = MultiServerMCPClient({"notes": {"transport": "streamable_http",
                                                 "url": f"http://127.0.0.1:{server.port}/mcp"}})
        tools = {tool.name: tool for tool in await client.get_tools()}

        async def call(name: str, arguments: dict[str, Any]) -> Any:
            return await tools[name].ainvoke(arguments)

        yield call, client.get_tools
    finally:
        server.stop()


# The frameworks CI installs in this environment (.ci/run names them): their tests fail, not skip, without them.
REQUIRED = set(filter(None, os.environ.get("MCP_TEST_AGENT_FRAMEWORKS", "").split(",")))


def framework(calls: Any, has_timeout: bool, name: str, module: str, line: int | None, peer: bool = False) -> Any:
    """A test parameter for a framework's client, importable as `module`, on mcp `line` (None: either)."""
    missing = None
    if not installed(module) and name not in REQUIRED:
        missing = f"{name} is not installed"
    elif line not in (None, MCP_MAJOR):
        missing = f"{name} runs on mcp {line}.x"
    elif peer and PEER_PYTHON is None:
        missing = "set MCP_PEER_PYTHON to a python whose environment has the other mcp line"
    marks = pytest.mark.skipif(missing is not None, reason=missing or "")
    return pytest.param(calls, has_timeout, id=name + ("-to-the-other-line" if peer else ""), marks=marks)


FRAMEWORK_CLIENTS = [
    framework(pydantic_ai_calls, True, "pydantic-ai", "pydantic_ai", None),  # its FastMCP client: either line
    framework(openai_agents_calls, True, "openai-agents", "agents", 2),
    framework(langchain_calls, False, "langchain-mcp-adapters", "langchain_mcp_adapters", 1),
    # The same client against a server of the other line (CI names its Python: see test_mixed_pairs).
    framework(functools.partial(langchain_calls, server_python=PEER_PYTHON or ""), False, "langchain-mcp-adapters",
              "langchain_mcp_adapters", 1, peer=True),
]


async def until_async(ask: Callable[[], Awaitable[Any]], answer: str, seconds: float = 10) -> None:
    """Ask the server until it gives `answer` (a tool's text, however the framework wraps it)."""
    with anyio.fail_after(seconds):
        while answer not in str(await ask()):
            await anyio.sleep(0.01)


def cancelled_ids(sink: OtlpSink) -> set[str]:
    """The request ids of the cancels the server received (a client stack may send one twice)."""
    return {span.attributes["tool.cancelled_request_id"] for span in sink.server_spans(SCOPE)
            if span.name == "notifications/cancelled"}


def served_by_name(sink: OtlpSink) -> dict[str, Any]:
    return {span.name: span for span in sink.server_spans(SCOPE) if span.attributes.get("mcp.method.name") ==
            "tools/call"}


@pytest.mark.parametrize(("calls", "has_timeout"), FRAMEWORK_CLIENTS)
async def test_a_frameworks_calls_have_one_span_each_with_the_outcome_and_the_ghost_is_reported_once(
    monkeypatch: pytest.MonkeyPatch, sink: OtlpSink, tmp_path: Path, calls: Any, has_timeout: bool
) -> None:
    hangs_up = getattr(calls, "func", calls) is langchain_calls
    with instrumented(monkeypatch) as captured:
        async with calls(sink, tmp_path) as (call, list_tools):
            await list_tools()
            await call("echo", {"text": "hi"})
            with contextlib.suppress(Exception):  # each framework reports a tool's error its own way
                await call("broken", {"text": "hi"})
            timed_out = set()
            if has_timeout:
                with pytest.raises(Exception):  # noqa: B017 - each framework raises its own timeout error
                    await call("hang", {})
                await until(lambda: "tools/call hang" in served_by_name(sink))  # its courtesy cancel was read
                timed_out = {served_by_name(sink)["tools/call hang"].attributes["jsonrpc.request.id"]}
            # The caller gives up on a write once it began; the write finishes after the server read the cancel.
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(call, GHOST, {"name": "ghost.md"})
                await call("wait_started", {})
                tasks.cancel_scope.cancel()
            if hangs_up:  # no cancel: the server notices its request's stream close
                await until_async(lambda: call("caller_gone", {"tool": GHOST}), "gone")
            else:
                await until(lambda: cancelled_ids(sink) - timed_out != set())
            await call("release", {})
            await until(lambda: (tmp_path / "ghost.md").exists())
        await until(lambda: any(s.name == f"tools/call {GHOST}" for s in sink.server_spans(SCOPE)))
        await until(lambda: sink.latest_points("tool.ghost_responses") != [])
        client_spans = captured.of_kind(SpanKind.CLIENT)
    client_calls = [s for s in client_spans if s.attributes.get("mcp.method.name") == "tools/call"
                    and s.name != "tools/call caller_gone"]  # the test asking the server, as often as it took

    # One CLIENT span per call, ours, with the verdict of its own end.
    verdicts = sorted((s.name, s.attributes["tool.outcome"], s.attributes.get("tool.cancel_reason"))
                      for s in client_calls)
    expected = [("tools/call broken", "failed", None), ("tools/call echo", "ok", None),
                ("tools/call release", "ok", None), (f"tools/call {GHOST}", "cancelled", "caller"),
                ("tools/call wait_started", "ok", None)]
    if has_timeout:
        expected.append(("tools/call hang", "cancelled", "timeout"))
    assert verdicts == sorted(expected)
    assert {s.instrumentation_scope.name for s in client_spans} == {SCOPE}

    # The server's side: the same outcomes, in the same traces; the ghost once, on its span and its counter.
    served = served_by_name(sink)
    for client_span in client_calls:
        server_span = served[client_span.name]
        assert server_span.trace_id == format(client_span.context.trace_id, "032x")
    assert [served[name].attributes["tool.outcome"] for name in ("tools/call echo", "tools/call broken")] == [
        "ok", "failed"]
    ghost = served[f"tools/call {GHOST}"]
    assert (ghost.attributes["tool.outcome"], ghost.attributes["tool.ghost_risk"]) == ("cancelled", "unsafe")
    assert [name for name, _ in ghost.events].count("tool.ghost_response") == 1
    (ghosts,) = sink.latest_points("tool.ghost_responses")
    assert (ghosts.attributes["gen_ai.tool.name"], ghosts.value) == (GHOST, 1)

