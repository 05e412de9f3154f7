"""A seam another instrumentation wrapped is still found. Traceloop's `opentelemetry-instrumentation-mcp` wraps the
SDK's `stdio_server` (and the client transports) in an `asynccontextmanager` of its own that enters the SDK's and
yields its streams; applied before ours, ours gets its layer, not the SDK's generator. The plugin follows the layers
down to the SDK's own and still observes the transport's stdout and watches its stdin."""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import wrapt

from tests.conftest import instrumentation

pytestmark = pytest.mark.anyio


def another_instrumentations_layer(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """Traceloop's transport wrapper's shape (0.62.4): enter the SDK's manager, yield what it yields."""

    @asynccontextmanager
    async def layer() -> AsyncIterator[Any]:
        async with wrapped(*args, **kwargs) as (read_stream, write_stream):
            yield read_stream, write_stream

    return layer()


@pytest.mark.parametrize("layers", [1, 2])
async def test_a_stdio_transport_another_library_wrapped_is_still_followed(layers: int, plugin_log) -> None:
    from mcp.server import stdio

    original = stdio.stdio_server
    for _ in range(layers):
        wrapt.wrap_function_wrapper(stdio, "stdio_server", another_instrumentations_layer)
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    stdin = anyio.wrap_file(io.TextIOWrapper(os.fdopen(stdin_read, "rb"), encoding="utf-8"))
    stdout = anyio.wrap_file(io.TextIOWrapper(os.fdopen(stdout_write, "wb"), encoding="utf-8"))
    try:
        with instrumentation():  # ours is applied over theirs: the outer layer
            async with stdio.stdio_server(stdin=stdin, stdout=stdout) as (read_stream, write_stream):
                # The transport's own stdout, found through their layers: its write and flush are observed.
                assert {"write", "flush"} <= set(vars(stdout))
                os.close(stdin_write)  # the caller hangs up: its reader, in a worker thread, reads the end
                await write_stream.aclose()  # and the server is done: its writer ends
                await read_stream.aclose()
            assert not {"write", "flush"} & set(vars(stdout))  # and no longer, once it has been left
        assert [record.getMessage() for record in plugin_log()] == []  # no capability lost
    finally:
        stdio.stdio_server = original
        os.close(stdout_read)
        await stdin.aclose()
        await stdout.aclose()
