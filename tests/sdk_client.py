"""The SDK's own client on either line, over any transport, behind one small interface."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from typing import Any

from tests.support import MCP_MAJOR

try:  # mcp 2.x
    from mcp.shared.exceptions import MCPError as SdkError
    from mcp_types import REQUEST_TIMEOUT
except ImportError:  # mcp 1.x reports its own read timeout as 408
    from mcp.shared.exceptions import McpError as SdkError

    REQUEST_TIMEOUT = 408


def is_tool_error(result: Any) -> bool:
    """A CallToolResult's isError, whichever line's model it is (2.x names the field in snake case)."""
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", None))


class SdkClient:
    def __init__(self, session: Any) -> None:
        self._session = session

    async def call_tool(self, name: str, arguments: dict[str, Any], timeout: float | None = None) -> Any:
        """The tool's result; raises TimeoutError when the client's own read timeout fired."""
        if timeout is not None and MCP_MAJOR == 1:
            timeout = timedelta(seconds=timeout)
        try:
            return await self._session.call_tool(name, arguments, read_timeout_seconds=timeout)
        except SdkError as exc:
            if exc.error.code == REQUEST_TIMEOUT:
                raise TimeoutError(exc.error.message) from exc
            raise

    async def get_prompt(self, name: str, arguments: dict[str, str]) -> Any:
        return await self._session.get_prompt(name, arguments)

    async def list_tools(self) -> Any:
        return await self._session.list_tools()

    async def ping(self) -> None:
        """Returns once the server has read every message sent before it (its read loop is ordered)."""
        await self._session.send_ping()


@asynccontextmanager
async def sdk_client(transport: AbstractAsyncContextManager[tuple[Any, Any]]) -> AsyncIterator[SdkClient]:
    """An initialized client session over `transport` (an async context manager yielding (read, write))."""
    if MCP_MAJOR == 2:
        from mcp import Client

        async with Client(transport, mode="legacy") as client:
            yield SdkClient(client)
    else:
        from mcp import ClientSession

        async with transport as (read_stream, write_stream), ClientSession(read_stream, write_stream) as session:
            await session.initialize()
            yield SdkClient(session)
