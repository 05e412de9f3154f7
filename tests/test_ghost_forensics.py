"""Ghost forensics on either SDK line: how dangerous a ghost is, and which later call retried it."""

from __future__ import annotations

import re
from typing import Any

import pytest
from opentelemetry.trace import INVALID_SPAN_CONTEXT, SpanKind

from otel_mcp_cancel import config, ghost_stats, memory, retries
from otel_mcp_cancel.request_state import LIVE
from tests.conftest import instrumented
from tests.raw_peer import is_result, raw_session, served_in_memory
from tests.sdk_client import sdk_client
from tests.servers import Gates, annotated_server, listing_lowlevel_server, make_ghost, notes_server
from tests.support import assert_ghost_line, until

pytestmark = pytest.mark.anyio

SECRET = "argument-value-7f3a9c"  # must never appear in exported telemetry


async def span_of(captured, request_id: Any):
    key = str(request_id)
    await until(lambda: any(s.attributes.get("jsonrpc.request.id") == key for s in captured.request_spans()))
    (span,) = [s for s in captured.request_spans() if s.attributes.get("jsonrpc.request.id") == key]
    return span


def ghost_event(span) -> dict[str, Any]:
    (event,) = [e for e in span.events if e.name == "tool.ghost_response"]
    return dict(event.attributes)


@pytest.mark.parametrize(
    ("annotations", "risk"),
    [
        (None, "unknown"),
        ({"title": "Commit"}, "unknown"),
        ({"readOnlyHint": True}, "none"),
        ({"readOnlyHint": False, "idempotentHint": True, "destructiveHint": False}, "idempotent"),
        ({"idempotentHint": True}, "idempotent"),
        ({"readOnlyHint": False, "idempotentHint": True, "destructiveHint": True}, "unsafe"),
        ({"readOnlyHint": False}, "unsafe"),
    ],
)
async def test_the_risk_comes_from_the_registered_annotations(framework, captured, annotations, risk) -> None:
    gates = Gates()
    before = ghost_stats().by_risk[risk]
    async with raw_session(annotated_server(gates, annotations, framework)) as peer:
        await make_ghost(peer, gates, 1, "commit", "a.md")
        span = await span_of(captured, 1)
    assert ghost_event(span) == {"tool.handler_outcome": "ok", "tool.ghost_risk": risk, "tool.ghost_kind": "suppressed"}
    (ghosts,) = captured.points("tool.ghost_responses")
    assert ghosts.attributes["tool.ghost_risk"] == risk == ghost_event(span)["tool.ghost_risk"]
    assert ghosts.attributes["tool.ghost_kind"] == "suppressed" == span.attributes["tool.ghost_kind"]
    assert span.attributes["tool.ghost_risk"] == risk  # one string: event, attribute and metric
    assert ghost_stats().by_risk[risk] == before + 1


async def test_a_low_level_server_is_read_from_its_own_listing(captured) -> None:
    gates = Gates()
    declared = {"readOnlyHint": False, "destructiveHint": True}
    async with raw_session(listing_lowlevel_server(gates, declared)) as peer:
        await peer.call("list", "tools/list", {})
        await make_ghost(peer, gates, 1, "commit", "a.md")
        span = await span_of(captured, 1)
    assert span.name == "tools/call commit"  # known from the listing, not folded
    assert ghost_event(span)["tool.ghost_risk"] == "unsafe"


async def test_a_retry_inside_the_window_is_linked_to_its_ghost(framework, captured) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates, framework)) as peer:
        await make_ghost(peer, gates, 1, "shielded_write", SECRET)
        ghost = await span_of(captured, 1)
        assert is_result(await peer.call(2, "tools/call", {"name": "shielded_write", "arguments": {"path": SECRET}}))
        assert is_result(await peer.call(3, "tools/call", {"name": "shielded_write", "arguments": {"path": "other"}}))
        retry, different = await span_of(captured, 2), await span_of(captured, 3)
    assert [(e.name, dict(e.attributes)) for e in retry.events] == [
        ("tool.ghost_retry", {"tool.retried_ghost_risk": "unknown"})
    ]
    assert [link.context for link in retry.links] == [ghost.context]
    assert retry.attributes["tool.retried_ghost_risk"] == "unknown"  # for stores that drop links and events
    assert "tool.ghost_risk" not in retry.attributes  # the retry itself is no ghost
    assert different.events == () and different.links == ()
    assert "tool.retried_ghost_risk" not in different.attributes
    (counted,) = captured.points("tool.ghost_retries")
    assert dict(counted.attributes) == {"gen_ai.tool.name": "shielded_write", "tool.ghost_risk": "unknown"}
    assert counted.value == 1


async def test_replicas_sharing_a_key_fingerprint_a_ghost_and_its_retry_elsewhere_alike(
    framework, monkeypatch
) -> None:
    """Two replicas of a server: the ghost on one, its retry (a new session) on the other, which cannot link
    it; both spans carry the same fingerprint, a store's join key. Another call's differs; no argument shows."""
    with instrumented(monkeypatch, OTEL_PYTHON_MCP_CANCEL_FINGERPRINT_KEY="replicas-share-this") as captured:
        gates = Gates()
        async with raw_session(notes_server(gates, framework)) as first_replica:
            await make_ghost(first_replica, gates, 1, "shielded_write", SECRET)
        async with raw_session(notes_server(gates, framework)) as second_replica:  # its writes released
            for request_id, path in ((2, SECRET), (3, "other")):
                params = {"name": "shielded_write", "arguments": {"path": path}}
                assert is_result(await second_replica.call(request_id, "tools/call", params))
            await second_replica.call(4, "tools/call", {"name": "echo", "arguments": {"text": SECRET}})
        ghost, retry, other, echo = [await span_of(captured, request_id) for request_id in (1, 2, 3, 4)]
    assert ghost.attributes["tool.ghost_risk"] == "unknown" and "tool.retried_ghost_risk" not in retry.attributes
    fingerprints = [span.attributes["tool.call_fingerprint"] for span in (ghost, retry, other, echo)]
    assert fingerprints[0] == fingerprints[1] and len(set(fingerprints)) == 3
    assert all(re.fullmatch(r"[0-9a-f]{32}", value) for value in fingerprints)
    assert fingerprints[0] == retries.CallFingerprints("replicas-share-this").of("shielded_write", {"path": SECRET})
    assert retries.CallFingerprints("another-key").of("shielded_write", {"path": SECRET}) != fingerprints[0]


async def test_without_a_shared_key_no_call_is_fingerprinted(framework, captured) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates, framework)) as peer:
        await make_ghost(peer, gates, 1, "shielded_write", SECRET)
        ghost = await span_of(captured, 1)
    assert "tool.call_fingerprint" not in ghost.attributes


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


async def test_a_retry_after_the_window_is_not_linked(framework, captured, monkeypatch) -> None:
    clock = FakeTime()
    monkeypatch.setattr(memory, "time", clock)
    gates = Gates()
    async with raw_session(notes_server(gates, framework)) as peer:
        await make_ghost(peer, gates, 1, "shielded_write", "a.md")
        await span_of(captured, 1)
        clock.now += config.DEFAULT_RETRY_WINDOW_SECONDS + 1
        await peer.call(2, "tools/call", {"name": "shielded_write", "arguments": {"path": "a.md"}})
        late = await span_of(captured, 2)
    assert late.events == () and late.links == ()
    assert captured.points("tool.ghost_retries") == []


async def test_two_sessions_are_not_confused(framework, captured) -> None:
    gates = Gates()
    server = notes_server(gates, framework)
    async with raw_session(server) as first:
        await make_ghost(first, gates, 1, "shielded_write", "a.md")
        await span_of(captured, 1)
    async with raw_session(server) as second:
        await second.call(2, "tools/call", {"name": "shielded_write", "arguments": {"path": "a.md"}})
        other_session = await span_of(captured, 2)
    assert other_session.links == ()
    assert captured.points("tool.ghost_retries") == []


async def test_no_argument_value_reaches_any_telemetry(framework, captured, plugin_log) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates, framework)) as peer:
        await make_ghost(peer, gates, 1, "shielded_write", SECRET)
        await peer.call(2, "tools/call", {"name": "shielded_write", "arguments": {"path": SECRET}})
        await span_of(captured, 2)
    exported = [
        (span.name, dict(span.attributes), [(e.name, dict(e.attributes)) for e in span.events],
         [dict(link.attributes or {}) for link in span.links])
        for span in captured.spans.get_finished_spans()
    ]
    exported += [dict(p.attributes) for name in ("mcp.server.operation.duration", "tool.ghost_responses",
                                                   "tool.ghost_retries") for p in captured.points(name)]
    exported += [record.getMessage() for record in plugin_log()]
    assert SECRET not in repr(exported)
    (line,) = plugin_log()  # the ghost's WARNING line, which names no argument
    assert_ghost_line(line, "shielded_write", 1)


def test_the_retry_table_stays_within_its_bound() -> None:
    class Session:
        pass

    table = retries.RecentCalls(window_seconds=300)
    session = Session()
    for n in range(100_000):
        table.remember(session, table.key_of("commit", {"path": f"{n}.md"}), span_context=INVALID_SPAN_CONTEXT,
                       label="unsafe")
    assert len(table) == retries.CAPACITY
    assert table.find(session, table.key_of("commit", {"path": "99999.md"})) is not None
    assert table.find(session, table.key_of("commit", {"path": "0.md"})) is None  # oldest out
    assert len(LIVE) == 0


async def test_a_client_marks_a_call_that_repeats_one_it_gave_up_on(captured) -> None:
    """A retry that lands on another replica is not linked by that replica's server; the client that gave up on
    the first call links it, in whichever of its sessions the retry goes."""
    gates = Gates()
    server = notes_server(gates)
    async with sdk_client(served_in_memory(server)) as client:
        with pytest.raises(TimeoutError):
            await client.call_tool("slow", {"text": SECRET}, timeout=0.05)  # waits for a release that never came
    gates.let_go()
    async with sdk_client(served_in_memory(server)) as client:  # a session of its own, as to another replica
        await client.call_tool("slow", {"text": "other"})
        await client.call_tool("slow", {"text": SECRET})
    given_up, other, retry = [span for span in captured.of_kind(SpanKind.CLIENT) if span.name == "tools/call slow"]
    assert (given_up.attributes["tool.outcome"], given_up.attributes["tool.cancel_reason"]) == ("cancelled", "timeout")
    assert "tool.retried_cancel_reason" not in given_up.attributes
    assert "tool.retried_cancel_reason" not in other.attributes and other.links == ()
    assert (retry.attributes["tool.outcome"], retry.attributes["tool.retried_cancel_reason"]) == ("ok", "timeout")
    assert [link.context.span_id for link in retry.links] == [given_up.context.span_id]
    assert SECRET not in repr([dict(span.attributes) for span in (given_up, other, retry)])
