"""Randomized cancellation races against ground truth, on either SDK line, over memory streams.

Each call's cancel lands before the handler starts, mid-work, about when it returns, after the answer
was written, or never. Mid-work is made, not hoped for: the handler holds at a gate until the server
has read the cancel, so every run has interrupted calls (plain cancels) and shielded ones that finish
anyway (ghosts); the other windows race at random. The tool records what really happened (finished:
its side effect is done) and the peer records every message on the wire. The telemetry must say
exactly that: one span per request, `tool.outcome` equal to what the caller got, a ghost event exactly
when a finished handler's answer never reached the wire, a crossed ghost (a span of its own under the call's)
exactly when a call was answered and its cancel was read after (the cancel crossed the answer: a caller sends a
cancel only for a call it still waits for), a ghost counter equal to the number of both, never two answers for
one id, every span ended, nothing left in the plugin's bookkeeping.

The verdict does not depend on the schedule: whatever order the races resolve in, the telemetry is
compared with what did happen. `RACE_CALLS` and `RACE_SEED` make a bigger or another run.
"""

from __future__ import annotations

import os
import random
from collections import Counter

import anyio
import pytest

from otel_mcp_cancel.hooks import client_transports
from otel_mcp_cancel.request_state import LIVE
from otel_mcp_cancel.session_telemetry import LIVE_SESSIONS
from tests.race_server import Gates, race_server
from tests.raw_peer import RawPeer, is_error, is_result, raw_session
from tests.support import MCP_MAJOR, until

pytestmark = pytest.mark.anyio

CALLS = int(os.environ.get("RACE_CALLS", "300"))
SEED = int(os.environ.get("RACE_SEED", "20261129"))
IN_FLIGHT = 8
WINDOWS = ("before-start", "mid-work", "about-return", "after-answer", "never")
# The first calls take every (window, shielded) pair on purpose; the rest are drawn at random.
COVERED = [(window, shielded) for shielded in (False, True) for window in WINDOWS]


def plan(request_id: int) -> tuple[str, bool, int]:
    """Call `request_id`'s window, shielding and work time: the same whichever worker sends it."""
    rng = random.Random(f"{SEED}/{request_id}")
    window, shielded = COVERED[request_id - 1] if request_id <= len(COVERED) else (
        rng.choice(WINDOWS), rng.random() < 0.5)
    return window, shielded, rng.randint(0, 3000)


async def one_call(peer: RawPeer, gates: Gates, request_id: int, plans: dict[int, tuple[str, bool]]) -> None:
    window, shielded, micros = plan(request_id)
    plans[request_id] = window, shielded
    key = str(request_id)
    arguments = {"key": key, "micros": micros, "shielded": shielded, "gated": window == "mid-work"}
    await peer.request(request_id, "tools/call", {"name": "work", "arguments": arguments})
    if window == "before-start":
        await peer.cancel(request_id, "race")
    elif window == "mid-work":  # held at its gate until the server has read the cancel
        await until(lambda: gates.started(key))
        await peer.cancel(request_id, "race")
        await peer.barrier(f"cancel-read-{request_id}")
        gates.open(key)
    elif window == "about-return":
        await anyio.sleep(micros / 1e6)
        await peer.cancel(request_id, "race")
    elif window == "after-answer":
        await peer.answer(request_id)
        await peer.cancel(request_id, "race")


async def test_randomized_cancels_agree_with_ground_truth(framework, captured, tmp_path) -> None:
    finished: set[str] = set()  # call keys whose side effect happened
    plans: dict[int, tuple[str, bool]] = {}
    gates = Gates(tmp_path)
    async with raw_session(race_server(finished.add, gates, framework.make)) as peer:
        ids = iter(range(1, CALLS + 1))

        async def worker() -> None:
            for request_id in ids:
                await one_call(peer, gates, request_id, plans)

        async with anyio.create_task_group() as tg:
            for _ in range(IN_FLIGHT):
                tg.start_soon(worker)
        # Every request settles: answered, acknowledged, or (2.x) its span ends unanswered.
        await until(lambda: sum(1 for s in captured.server_spans() if s.name == "tools/call work") == CALLS, 30)
        await peer.barrier("still-answering")  # the server still answers

    spans = {}
    for span in captured.server_spans():
        if span.name == "tools/call work":
            request_id = span.attributes["jsonrpc.request.id"]
            assert request_id not in spans, f"two spans for request {request_id}"
            spans[request_id] = span
    assert len(spans) == CALLS

    crossed_under = {span.parent.span_id for span in captured.spans.get_finished_spans()
                     if span.name == "tool.ghost_response" and span.attributes["tool.ghost_kind"] == "crossed"}
    ghosts = crossings = 0
    for request_id in range(1, CALLS + 1):
        answers = peer.answers(request_id)
        results = [a for a in answers if is_result(a)]
        assert len(results) + sum(1 for a in answers if is_error(a, 0)) == len(answers) <= 1, (request_id, answers)
        span = spans[str(request_id)]
        got = "ok" if results else "cancelled"
        assert span.attributes["tool.outcome"] == got, (request_id, plans[request_id][0], span.attributes, answers)
        ghost = got == "cancelled" and str(request_id) in finished
        events = [e.name for e in span.events]
        assert ("tool.ghost_response" in events) == ghost, (request_id, plans[request_id][0], events)
        assert ("tool.request_cancelled" in events) == (got == "cancelled"), (request_id, events)
        assert span.end_time is not None
        crossed = got == "ok" and plans[request_id][0] != "never"  # answered, and its cancel read after
        assert (span.context.span_id in crossed_under) == crossed, (request_id, plans[request_id][0])
        ghosts += ghost
        crossings += crossed
    counted = sum(p.value for p in captured.points("tool.ghost_responses"))
    assert counted == ghosts + crossings and len(crossed_under) == crossings
    outcomes = Counter((plans[int(i)][0], span.attributes["tool.outcome"]) for i, span in spans.items())
    print(f"\nrace harness, {framework} on mcp {MCP_MAJOR}.x, {CALLS} calls, seed {SEED}: {ghosts} ghosts, "
          f"{crossings} crossed;",
          ", ".join(f"{window} {outcome} {n}" for (window, outcome), n in sorted(outcomes.items())))
    assert len(LIVE) == len(LIVE_SESSIONS) == client_transports.open_count() == 0
    # Every window was exercised; a call cancelled mid-work is cancelled, and a ghost exactly when shielded.
    assert {window for window, _ in plans.values()} == set(WINDOWS)
    for request_id, (window, shielded) in plans.items():
        if window == "mid-work":
            span = spans[str(request_id)]
            assert span.attributes["tool.outcome"] == "cancelled", (request_id, span.attributes)
            assert ("tool.ghost_response" in [e.name for e in span.events]) == shielded, request_id
