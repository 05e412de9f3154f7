"""mcp 1.x: the ghost kills the session (SDK issue #2416); the guard keeps it alive and records the ghost."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import anyio
import pytest

from tests.conftest import Captured, instrumented
from tests.raw_peer import RawPeer, is_error, is_result, raw_session
from tests.servers import Gates, notes_server
from tests.support import assert_ghost_line, until

pytestmark = pytest.mark.anyio


@pytest.fixture
def guard_off(monkeypatch) -> Iterator[Captured]:
    with instrumented(monkeypatch, OTEL_PYTHON_MCP_CANCEL_GHOST_GUARD="off") as telemetry:
        yield telemetry


async def ghost(peer: RawPeer, gates: Gates) -> None:
    """A shielded write is cancelled mid-way, then finishes and answers late."""
    await peer.request(1, "tools/call", {"name": "shielded_write", "arguments": {"path": "late.md"}})
    await gates.started.wait()
    await peer.cancel(1, "caller cancelled")
    await peer.barrier("after-cancel")
    gates.let_go()
    await until(lambda: gates.side_effects == ["late.md"])


async def assert_session_died(peer: RawPeer) -> None:
    await until(lambda: peer.crashes != [])
    assert "Request already responded to" in repr(peer.crashes[0].exceptions)
    with pytest.raises((anyio.BrokenResourceError, anyio.ClosedResourceError)):
        await peer.request(2, "tools/call", {"name": "echo", "arguments": {"text": "next"}})


def ghost_span(captured: Captured):
    (span,) = [s for s in captured.request_spans() if s.attributes.get("jsonrpc.request.id") == "1"]
    return span


async def test_with_the_guard_the_same_connection_answers_the_next_call(captured, plugin_log) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates)) as peer:
        await ghost(peer, gates)
        assert is_result(await peer.call(2, "tools/call", {"name": "echo", "arguments": {"text": "next"}}))
        (acknowledgement,) = peer.answers(1)  # exactly one answer for the id: the SDK's acknowledgement
        assert is_error(acknowledgement, 0)
        await until(lambda: any(s.attributes.get("jsonrpc.request.id") == "1" for s in captured.request_spans()))
    span = ghost_span(captured)
    assert span.attributes["tool.outcome"] == "cancelled"
    assert [(e.name, dict(e.attributes)) for e in span.events] == [
        ("tool.request_cancelled", {"tool.cancel_message": "caller cancelled"}),
        ("tool.ghost_response", {"tool.handler_outcome": "ok", "tool.ghost_risk": "unknown",
                                 "tool.ghost_kind": "suppressed"}),
    ]
    assert "error.type" not in span.attributes
    (ghosts,) = captured.points("tool.ghost_responses")
    assert ghosts.value == 1 and ghosts.attributes["gen_ai.tool.name"] == "shielded_write"
    (line,) = plugin_log()
    assert_ghost_line(line, "shielded_write", 1)


async def test_with_the_guard_off_the_ghost_is_recorded_and_the_session_dies(guard_off) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates)) as peer:
        await ghost(peer, gates)
        await assert_session_died(peer)
    span = ghost_span(guard_off)
    assert span.attributes["tool.outcome"] == "cancelled"
    assert [e.name for e in span.events] == ["tool.request_cancelled", "tool.ghost_response"]
    (ghosts,) = guard_off.points("tool.ghost_responses")
    assert ghosts.value == 1
    # The session that died is measured once, with what ended it.
    (session,) = guard_off.points("mcp.server.session.duration")
    assert (session.count, session.attributes["error.type"]) == (1, "AssertionError")


async def test_without_the_plugin_the_session_dies() -> None:
    gates = Gates()
    async with raw_session(notes_server(gates)) as peer:
        await ghost(peer, gates)
        await assert_session_died(peer)


async def test_the_sdks_duplicate_response_line_does_not_change_the_outcome(captured, caplog) -> None:
    caplog.set_level(logging.INFO, logger="mcp.server.lowlevel.server")
    gates = Gates()
    async with raw_session(notes_server(gates)) as peer:
        await peer.request(1, "tools/call", {"name": "slow", "arguments": {"text": "x"}})
        await gates.started.wait()
        await peer.cancel(1, "stop")
        await peer.barrier("b")
        await until(lambda: any(s.attributes.get("jsonrpc.request.id") == "1" for s in captured.request_spans()))
    assert "Request 1 cancelled - duplicate response suppressed" in caplog.text
    span = ghost_span(captured)
    assert span.attributes["tool.outcome"] == "cancelled"
    assert [e.name for e in span.events] == ["tool.request_cancelled"]
    assert captured.points("tool.ghost_responses") == []


async def test_with_the_guard_off_a_cancel_during_the_write_is_on_the_span(guard_off) -> None:
    async with raw_session(notes_server(Gates())) as peer:
        await peer.request_with_its_answer_blocked(44, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        await peer.cancel(44, "too late")
        peer.resume_reading()
        await until(lambda: peer.closed)  # the SDK lets the cancellation escape: the session ends
    (span,) = [s for s in guard_off.request_spans() if s.attributes.get("jsonrpc.request.id") == "44"]
    assert [e.name for e in span.events] == ["tool.response_write_interrupted"]


async def test_with_the_guard_off_several_ghosts_end_the_session_named_by_their_cause(guard_off) -> None:
    """Two ghosts answer late at once: the task group's exception group holds both AssertionErrors."""
    gates = Gates()
    async with raw_session(notes_server(gates)) as peer:
        for request_id in (1, 2):
            arguments = {"path": f"{request_id}.md"}
            await peer.request(request_id, "tools/call", {"name": "shielded_write", "arguments": arguments})
            await gates.started.wait()
            gates.started = anyio.Event()  # the next call's start
        for request_id in (1, 2):
            await peer.cancel(request_id, "caller cancelled")
        await peer.barrier("after-cancels")
        gates.let_go()
        await until(lambda: sorted(gates.side_effects) == ["1.md", "2.md"])
        await until(lambda: peer.crashes != [])
    (crash,) = peer.crashes
    (session,) = guard_off.points("mcp.server.session.duration")
    assert (session.count, session.attributes["error.type"]) == (1, "AssertionError"), repr(crash)
