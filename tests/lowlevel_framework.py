"""What an application on the SDK's low-level `Server` writes by hand, behind the high-level servers' decorators.

`LowLevelApp(name)` takes `@app.tool(...)` and `@app.resource(template)` as MCPServer and FastMCP do, and
serves them from a low-level `Server` (`app._lowlevel_server`) whose handlers dispatch by name: a tool
that raises answers `isError`, a sync tool runs in a worker thread, as the frameworks do. Nothing but
the server's own tools/list answers tells the plugin which tools it registered, so its sessions list
first (`lists_tools_first`), as the SDK's client does before calling.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import anyio

from tests.support import MCP_MAJOR


class LowLevelApp:
    lists_tools_first = True

    def __init__(self, name: str) -> None:
        self._tools: dict[str, tuple[Callable[..., Any], dict[str, Any] | None]] = {}
        self._resources: list[tuple[re.Pattern[str], Callable[..., Any]]] = []
        self._lowlevel_server = _serve_v2(self, name) if MCP_MAJOR == 2 else _serve_v1(self, name)

    def tool(self, name: str | None = None, annotations: Any = None) -> Callable[[Callable[..., Any]], Any]:
        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            declared = None if annotations is None else annotations.model_dump(by_alias=True, exclude_none=True)
            self._tools[name or function.__name__] = (function, declared)
            return function

        return register

    def resource(self, template: str) -> Callable[[Callable[..., Any]], Any]:
        pattern = re.compile("^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template)) + "$")

        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            self._resources.append((pattern, function))
            return function

        return register

    def listing(self) -> list[dict[str, Any]]:
        """The tools as the wire lists them."""
        return [
            {"name": name, "inputSchema": {"type": "object"}, **({"annotations": declared} if declared else {})}
            for name, (_, declared) in self._tools.items()
        ]

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """The tool's text and whether it is an error."""
        if name not in self._tools:
            return f"Unknown tool: {name}", True
        function = self._tools[name][0]
        try:
            if inspect.iscoroutinefunction(function):
                return str(await function(**arguments)), False
            return str(await anyio.to_thread.run_sync(lambda: function(**arguments))), False
        except Exception as exc:  # a tool's failure is its result, as the frameworks answer it
            return str(exc), True

    def run(self) -> None:
        """Serve on stdio, as the frameworks' run() does."""
        from mcp.server.stdio import stdio_server

        async def serve() -> None:
            server = self._lowlevel_server
            async with stdio_server() as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())

        anyio.run(serve)

    async def read(self, uri: str) -> str:
        for pattern, function in self._resources:
            if (match := pattern.match(uri)) is not None:
                return await function(**match.groupdict())
        raise ValueError(f"Unknown resource: {uri}")


def _serve_v2(app: LowLevelApp, name: str) -> Any:
    from mcp.server import Server
    from mcp_types import CallToolResult, ListToolsResult, ReadResourceResult, TextContent, TextResourceContents, Tool

    async def list_tools(ctx: Any, params: Any) -> Any:
        return ListToolsResult(tools=[Tool.model_validate(tool) for tool in app.listing()])

    async def call_tool(ctx: Any, params: Any) -> Any:
        text, is_error = await app.call(params.name, params.arguments or {})
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=is_error)

    async def read_resource(ctx: Any, params: Any) -> Any:
        text = await app.read(str(params.uri))
        return ReadResourceResult(contents=[TextResourceContents(uri=str(params.uri), text=text)])

    return Server(name, on_list_tools=list_tools, on_call_tool=call_tool, on_read_resource=read_resource)


def _serve_v1(app: LowLevelApp, name: str) -> Any:
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.server.lowlevel.helper_types import ReadResourceContents

    server = Server(name)

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return [types.Tool.model_validate(tool) for tool in app.listing()]

    @server.call_tool(validate_input=False)
    async def call_tool(tool: str, arguments: dict[str, Any]) -> list[types.TextContent]:
        text, is_error = await app.call(tool, arguments)
        if is_error:  # the decorator answers a raise with isError (mcp 1.12 takes no CallToolResult back)
            raise RuntimeError(text)
        return [types.TextContent(type="text", text=text)]

    @server.read_resource()
    async def read_resource(uri: Any) -> list[ReadResourceContents]:
        return [ReadResourceContents(content=await app.read(str(uri)), mime_type="text/plain")]

    return server
