"""Nothing of a closed session stays alive: after sessions with ok, failed and cancelled calls, a cancel that
crosses an answer and a call its client gave up on, every session, dispatcher, responder and request record they
made is collected once they close. Weak references are taken to each while the sessions are open (found by the
collector, so that no test code holds them), then `gc.collect()`: none is alive. Over memory streams, streamable
HTTP (stateful and stateless) and SSE, served in process, on either line."""

from __future__ import annotations

import gc
import importlib
import logging
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from otel_mcp_cancel.request_state import RequestRecord
from tests.conftest import Captured
from tests.in_process import http_app, served_over_http
from tests.raw_peer import is_result, raw_peer_over, served_in_memory
from tests.sdk_client import sdk_client
from tests.servers import Gates, notes_server
from tests.subprocess_servers import http_streams
from tests.support import MCP_MAJOR, cancel_when

pytestmark = pytest.mark.anyio

# What a session is made of, per line: its session or dispatcher, the per-request objects, the client's session.
SESSION_PARTS = {
    1: ["mcp.server.session:ServerSession", "mcp.shared.session:RequestResponder", "mcp.client.session:ClientSession"],
    2: ["mcp.shared.jsonrpc_dispatcher:JSONRPCDispatcher", "mcp.server.runner:ServerRunner",
        "mcp.client.session:ClientSession"],
}[MCP_MAJOR]


def session_types() -> tuple[type, ...]:
    found: list[type] = [RequestRecord]
    for path in SESSION_PARTS:
        module, name = path.split(":")
        found.append(getattr(importlib.import_module(module), name))
    return tuple(found)


def alive(types: tuple[type, ...]) -> list[weakref.ref[Any]]:
    return [weakref.ref(found) for found in gc.get_objects() if isinstance(found, types)]


def names(refs: list[weakref.ref[Any]]) -> list[str]:
    return sorted(type(found).__name__ for ref in refs if (found := ref()) is not None)


async def client_traffic(streams: Any, gates: Gates, taken: Callable[[], None]) -> None:
    """Through the SDK's client: ok, isError, a call cancelled mid-work, and one its timeout gave up on."""
    async with sdk_client(streams) as client:
        with anyio.fail_after(20):
            await client.call_tool("echo", {"text": "a"})
            await client.call_tool("broken", {"text": "b"})
            await cancel_when(gates.started.wait, lambda: client.call_tool("slow", {"text": "c"}))
            gates.started = anyio.Event()
            with pytest.raises(TimeoutError):
                await client.call_tool("slow", {"text": "d"}, timeout=0.05)
            taken()  # every part of this session is alive now
            gates.let_go()
            await client.call_tool("echo", {"text": "e"})


@asynccontextmanager
async def sse_streams(url: str) -> AsyncIterator[tuple[Any, Any]]:
    from mcp.client.sse import sse_client

    async with sse_client(url) as streams:
        yield streams


async def run_sessions(transport: str, sessions: int, taken: Callable[[], None]) -> None:
    gates = Gates()
    server = notes_server(gates)
    if transport == "memory":
        for _ in range(sessions):
            await client_traffic(served_in_memory(server), gates, taken)
            gates = _reset(gates)
        await crossed_in_memory(notes_server(Gates()))
        return
    sse = transport == "sse"
    app = http_app(server, stateless=transport == "http-stateless", sse=sse)
    async with served_over_http(app, "/sse" if sse else "/mcp") as url:
        for _ in range(sessions):
            await client_traffic(sse_streams(url) if sse else http_streams(url), gates, taken)
            gates = _reset(gates)


def _reset(gates: Gates) -> Gates:
    gates.started, gates.release = anyio.Event(), anyio.Event()
    return gates


async def crossed_in_memory(server: Any) -> None:
    """A cancel read for a call the session has just answered: it crossed the answer (a crossed ghost)."""
    async with served_in_memory(server) as (read, write), raw_peer_over(read, write) as peer:
        assert is_result(await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "x"}}))
        await peer.cancel(1, "timed out")
        await peer.barrier("after")


@pytest.mark.parametrize("transport", ["memory", "http-stateful", "http-stateless", "sse"])
async def test_no_part_of_a_closed_session_stays_alive(captured: Captured, transport: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    # The SDK logs a failing tool's traceback, whose frames hold its session; the test's log capture would keep it.
    caplog.set_level(logging.CRITICAL, logger="mcp")
    types = session_types()
    gc.collect()
    before = {id(ref()) for ref in alive(types)}
    held: list[weakref.ref[Any]] = []
    seen: set[str] = set()

    def taken() -> None:
        held.extend(ref for ref in alive(types) if id(ref()) not in before)
        seen.update(names(held))

    await run_sessions(transport, 3, taken)
    server_session = types[1].__name__
    assert {"RequestRecord", server_session} <= seen  # the weak references held what they should
    gc.collect()
    assert names(held) == []
    if transport == "memory":  # a crossing was remembered, and found, without keeping its session
        kinds = {point.attributes["tool.ghost_kind"] for point in captured.points("tool.ghost_responses")}
        assert "crossed" in kinds
