"""Line-agnostic test support: which mcp line is installed, and waiting without guessing at order."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

MCP_MAJOR = int(importlib.metadata.version("mcp").split(".")[0])
only_v1 = pytest.mark.skipif(MCP_MAJOR != 1, reason="mcp 1.x behaviour")
only_v2 = pytest.mark.skipif(MCP_MAJOR != 2, reason="mcp 2.x behaviour")


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
