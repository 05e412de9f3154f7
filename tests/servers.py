"""The high-level servers the tests drive (the SDK's own, or standalone FastMCP: see tests/frameworks.py),
with tools that record ground truth and wait on events the test sets."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import anyio

from tests.frameworks import SDK, Framework
from tests.support import until


@dataclass
class Gates:
    """Test-controlled synchronisation: a tool says it started, then waits until the test releases it."""

    started: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)
    thread_started: threading.Event = field(default_factory=threading.Event)
    thread_release: threading.Event = field(default_factory=threading.Event)
    side_effects: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)  # the texts of `slow` calls that ran to their end

    def let_go(self) -> None:
        self.release.set()
        self.thread_release.set()


async def _shielded_commit(gates: Gates, path: str) -> str:
    """Starts, then commits once released, whatever happens to the caller meanwhile."""
    gates.started.set()
    with anyio.CancelScope(shield=True):
        await gates.release.wait()
        gates.side_effects.append(path)
    return f"wrote {path}"


async def make_ghost(peer: Any, gates: Gates, request_id: Any, tool: str, path: str) -> None:
    """A raw peer's call of a shielded writing tool, cancelled once it started, then let finish: a ghost."""
    await peer.request(request_id, "tools/call", {"name": tool, "arguments": {"path": path}})
    await gates.started.wait()
    await peer.cancel(request_id, "timed out after 5.0s")
    await peer.barrier(f"after-{request_id}")
    gates.let_go()
    await until(lambda: path in gates.side_effects)


def annotated_server(gates: Gates, annotations: dict[str, Any] | None, framework: Framework = SDK) -> Any:
    """One shielded writing tool, `commit`, registered with the given annotations (camelCase, as on the wire)."""
    try:
        from mcp_types import ToolAnnotations
    except ImportError:  # mcp 1.x
        from mcp.types import ToolAnnotations

    async def commit(path: str) -> str:
        return await _shielded_commit(gates, path)

    server = framework.make("annotated")
    declared = None if annotations is None else ToolAnnotations.model_validate(annotations)
    server.tool(name="commit", annotations=declared)(commit)
    return server


def notes_server(gates: Gates, framework: Framework = SDK) -> Any:
    server = framework.make("notes")

    @server.tool()
    def echo(text: str) -> str:
        return text

    @server.tool()
    def broken(text: str) -> str:
        raise ValueError("the tool failed")

    @server.tool()
    async def slow(text: str) -> str:
        gates.started.set()
        await gates.release.wait()
        gates.finished.append(text)
        return text

    @server.tool()
    async def shielded_write(path: str) -> str:
        return await _shielded_commit(gates, path)

    @server.tool()
    async def shielded_broken(path: str) -> str:
        gates.started.set()
        with anyio.CancelScope(shield=True):
            await gates.release.wait()
            gates.side_effects.append(path)
        raise ValueError("failed after writing")

    @server.tool()
    def sync_write(path: str) -> str:
        gates.thread_started.set()
        gates.thread_release.wait(30)
        gates.side_effects.append(path)
        return f"wrote {path}"

    @server.resource("notes://{name}")
    async def note(name: str) -> str:
        gates.started.set()
        with anyio.CancelScope(shield=True):
            await gates.release.wait()
        return f"note {name}"

    return server


def raising_lowlevel_server() -> Any:
    """A low-level server whose tools/call handler raises: the SDK answers with a JSON-RPC error, code 0."""
    try:
        from mcp.server import Server

        async def call_tool(ctx: Any, params: Any) -> Any:
            raise RuntimeError("boom")

        async def list_tools(ctx: Any, params: Any) -> Any:
            raise AssertionError("not listed in this test")

        return Server("lowlevel", on_call_tool=call_tool, on_list_tools=list_tools)
    except TypeError:  # mcp 1.x: handlers are registered per request type, not as constructor arguments
        from mcp import types
        from mcp.server.lowlevel import Server

        async def raising(request: Any) -> Any:
            raise RuntimeError("boom")

        server = Server("lowlevel")
        # The 1.x `call_tool` decorator would turn the exception into isError; register the bare handler.
        server.request_handlers[types.CallToolRequest] = raising
        return server


def listing_lowlevel_server(gates: Gates, annotations: dict[str, Any]) -> Any:
    """A low-level server whose only knowledge of its tool's annotations is its own tools/list answer."""
    try:
        from mcp_types import CallToolResult, ListToolsResult, TextContent, Tool
    except ImportError:  # mcp 1.x registers handlers with decorators
        from mcp import types
        from mcp.server.lowlevel import Server

        server = Server("listing")

        @server.list_tools()
        async def listed() -> list[types.Tool]:
            return [types.Tool.model_validate(_commit_tool(annotations))]

        @server.call_tool(validate_input=False)
        async def called(name: str, arguments: dict[str, Any]) -> list[types.TextContent]:
            return [types.TextContent(type="text", text=await _shielded_commit(gates, arguments["path"]))]

        return server
    from mcp.server import Server

    async def list_tools(ctx: Any, params: Any) -> Any:
        return ListToolsResult(tools=[Tool.model_validate(_commit_tool(annotations))])

    async def call_tool(ctx: Any, params: Any) -> Any:
        text = await _shielded_commit(gates, params.arguments["path"])
        return CallToolResult(content=[TextContent(type="text", text=text)])

    return Server("listing", on_list_tools=list_tools, on_call_tool=call_tool)


def _commit_tool(annotations: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    return {"name": "commit", "inputSchema": schema, "annotations": annotations}
