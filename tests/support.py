"""Line-agnostic test support: which mcp line is installed, and waiting without guessing at order."""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

MCP_MAJOR = int(importlib.metadata.version("mcp").split(".")[0])
only_v1 = pytest.mark.skipif(MCP_MAJOR != 1, reason="mcp 1.x behaviour")
only_v2 = pytest.mark.skipif(MCP_MAJOR != 2, reason="mcp 2.x behaviour")

# The ghost WARNING's text starts with this, as the design fixed it for operators to grep: written out here, not
# imported from the plugin, so that the tests hold the string itself.
GHOST_LINE_PREFIX = "mcp.ghost_response.suppressed_after_cancel_ack"


def is_ghost_line(text: str) -> bool:
    return text.startswith(f"{GHOST_LINE_PREFIX}: ")


def assert_ghost_line(line: logging.LogRecord, tool: str, request_id: Any) -> None:
    """`line` is a ghost's WARNING as operators grep for it: the fixed prefix, then the tool and the request id."""
    message = line.getMessage()
    assert (line.name, line.levelno) == ("otel_mcp_cancel", logging.WARNING), message
    assert is_ghost_line(message), message
    assert f"tool {tool!r}" in message and f"request id {request_id!r}" in message, message
    assert line.__dict__["jsonrpc.request.id"] == str(request_id)


async def until(condition: Callable[[], bool], seconds: float = 10) -> None:
    """Wait for a condition another task or thread will make true; fail, never pass, on the deadline."""
    with anyio.fail_after(seconds):
        while not condition():
            await anyio.sleep(0.001)


async def cancel_when(
    trigger: Callable[[], Awaitable[Any]],
    call: Callable[[], Awaitable[Any]],
    then: Callable[[], None] = lambda: None,
) -> Any:
    """Run `call()` as a caller would, cancel it the moment `trigger()` returns, then run `then()`.

    Returns what `call()` returned, or None if the cancel stopped it.
    """
    returned: list[Any] = []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def cancel() -> None:
                await trigger()
                scope.cancel()
                then()

            tg.start_soon(cancel)
            returned.append(await call())
    return returned[0] if returned else None
