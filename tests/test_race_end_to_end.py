"""Randomized cancellation races between the SDK's own client and server, both instrumented, against
ground truth, on either SDK line, over memory streams and over stdio (server in a subprocess).

Each call's cancel lands after its request reached the wire: at once (before the handler starts),
mid-work, about when the handler returns, through the client's own read timeout, or never; over stdio also
while the server's loop is blocked (synchronous work inside an `async` tool), which then answers before it reads
the cancel. Mid-work and the blocked loop are made, not hoped for: the handler holds at a gate
(`tests/race_server.py`) until the server has read the cancel (or, its loop blocked, until the cancel is on its
way), and the first calls take every combination of window, shielding and failing on purpose, so
every run has plain cancels, ghosts and failures; the other windows race at random. The tool records
what really happened (its side effect is done); a recorder on the wire (`tests/wire.py`) sees every
request, answer and cancel. Then, for every call:

- exactly one CLIENT span and one SERVER span, in one trace;
- the client span's `tool.outcome` (and cancel reason) is what the caller got;
- the server span's `tool.outcome` is what its answer on the wire says, or cancelled when none was;
- a ghost event exactly when a finished handler's answer never reached the wire, saying how the
  handler ended; a crossed ghost (a span of its own) exactly when the server answered a call whose cancel
  it then read (the caller had given up first); and a ghost counter equal to the number of both;
- a late answer on the client (a span of its own under the client's) only where the caller gave up and a
  result came, and always where a blocked loop answered after the cancel (mcp 1.23 and later);
- never two answers for one id; every span ended; the server still answers at the end; nothing left
  in the plugin's bookkeeping.

A 1.x client sends no cancel of its own: the harness turns on the plugin's courtesy cancel, as a
user who wants 1.x servers to see their callers' cancels would. `RACE_CALLS` and `RACE_SEED` make a
bigger or another run.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, TextIO

import anyio
import pytest
from mcp.client.stdio import stdio_client
from opentelemetry.trace import SpanKind
from packaging.version import Version

from examples.otlp_sink import OtlpSink, exporter_environment
from otel_mcp_cancel.hooks import client_transports
from otel_mcp_cancel.request_state import LIVE
from otel_mcp_cancel.session_telemetry import LIVE_SESSIONS
from tests.conftest import Captured, instrumented
from tests.frameworks import Framework
from tests.race_server import Gates, race_server
from tests.raw_peer import is_error, is_result, served_in_memory
from tests.sdk_client import SdkClient, is_tool_error, sdk_client
from tests.subprocess_servers import instrumented_script
from tests.support import MCP_MAJOR, cancel_when, until
from tests.wire import Wire

try:
    from mcp import StdioServerParameters
except ImportError:  # mcp 1.x
    from mcp.client.stdio import StdioServerParameters

pytestmark = pytest.mark.anyio

CALLS = int(os.environ.get("RACE_CALLS", "200"))
SEED = int(os.environ.get("RACE_SEED", "20261129"))
IN_FLIGHT = 8
MAX_WORK_MICROS = 20_000  # long enough for a cancel to cross the client, the recorder and the server mid-work
WINDOWS = ("at-once", "mid-work", "about-return", "timeout", "never")
# Over stdio, a server whose loop is blocked too: held at its gate with nothing read until the test opens it (only
# once the cancel is on its way), so it writes its answer and only then reads the cancel. In process, a blocked
# loop would block the test with it.
STDIO_WINDOWS = (*WINDOWS, "blocked-loop")
# Before mcp 1.23 a client drops an answer it gave up on inside its receive loop, where nothing is hooked.
SEES_LATE_ANSWERS = Version(version("mcp")) >= Version("1.23")
RACE_SERVER = Path(__file__).resolve().parent / "race_server.py"
GHOST_EVENT = "tool.ghost_response"
CANCEL_EVENT = "tool.request_cancelled"


@dataclass
class Call:
    key: str
    window: str
    fails: bool  # the tool raises after its side effect: an isError result
    shielded: bool  # the tool's work completes whatever the caller does
    got: str = ""  # what the caller got: ok | failed | cancelled
    reason: str | None = None  # why the caller got cancelled: caller | timeout


@dataclass(frozen=True)
class ServerSpan:
    """A SERVER span, read in-process or as received over OTLP."""

    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    trace_id: str
    parent_span_id: str


@dataclass(frozen=True)
class Server:
    """Where the race server runs, what it finished, and the spans and ghost count it reported."""

    transport: Callable[[], AbstractAsyncContextManager[tuple[Any, Any]]]
    finished: Callable[[], set[str]]
    spans: Callable[[], list[ServerSpan]]
    ghosts_counted: Callable[[], float]
    crossed: Callable[[], list[str]]  # the request ids of the crossed ghosts' spans
    windows: tuple[str, ...]


def in_process(captured: Captured, gates: Gates, framework: Framework) -> Server:
    finished: set[str] = set()
    return Server(
        transport=lambda: served_in_memory(race_server(finished.add, gates, framework.make)),
        finished=lambda: finished,
        spans=lambda: [
            ServerSpan(
                dict(span.attributes),
                [(event.name, dict(event.attributes)) for event in span.events],
                f"{span.context.trace_id:032x}",
                f"{span.parent.span_id:016x}" if span.parent else "",
            )
            for span in captured.of_kind(SpanKind.SERVER)
            if span.name == "tools/call work"
        ],
        ghosts_counted=lambda: sum(point.value for point in captured.points("tool.ghost_responses")
                                   if point.attributes["tool.ghost_kind"] != "late_answer"),  # the server's
        crossed=lambda: [span.attributes["jsonrpc.request.id"] for span in captured.spans.get_finished_spans()
                         if span.name == "tool.ghost_response" and span.attributes["tool.ghost_kind"] == "crossed"],
        windows=WINDOWS,
    )


def over_stdio(sink: OtlpSink, directory: Path, gates: Gates, errors: TextIO, framework: Framework) -> Server:
    """The server's stderr (the SDK logs each failing tool's traceback) goes to `errors`."""
    finished_file = directory / "finished"
    finished_file.touch()
    command, *args = instrumented_script(RACE_SERVER, str(finished_file), str(gates.directory))
    environment = {**exporter_environment(sink.endpoint), "RACE_FRAMEWORK": framework.name}
    parameters = StdioServerParameters(command=command, args=args, env=environment)
    return Server(
        transport=lambda: stdio_client(parameters, errlog=errors),
        finished=lambda: set(finished_file.read_text().split()),
        spans=lambda: [
            ServerSpan(span.attributes, span.events, span.trace_id, span.parent_span_id)
            for span in sink.server_spans("otel_mcp_cancel")
            if span.name == "tools/call work"
        ],
        ghosts_counted=lambda: sum(point.value for point in sink.latest_points("tool.ghost_responses")),
        crossed=lambda: [span.attributes["jsonrpc.request.id"] for span in list(sink.spans)
                         if span.name == "tool.ghost_response" and span.attributes["tool.ghost_kind"] == "crossed"],
        windows=STDIO_WINDOWS,
    )


def key_of(request: Any) -> Any:
    return ((request.params or {}).get("arguments") or {}).get("key")


def plan(index: int, windows: tuple[str, ...]) -> tuple[str, bool, bool, random.Random]:
    """Call `index`'s window, shielding and failing, and its own generator for the rest: the same
    whichever worker sends it. The first calls take every (window, shielded, fails) combination on purpose."""
    rng = random.Random(f"{SEED}/{index}")
    covered = [(window, shielded, fails) for fails in (False, True) for shielded in (False, True) for window in windows]
    if index <= len(covered):
        return (*covered[index - 1], rng)
    return rng.choice(windows), rng.random() < 0.5, rng.random() < 0.2, rng


async def one_call(client: SdkClient, wire: Wire, gates: Gates, index: int, windows: tuple[str, ...]) -> Call:
    key = str(index)
    window, shielded, fails, rng = plan(index, windows)
    call = Call(key, window, fails, shielded)
    micros = rng.randint(0, MAX_WORK_MICROS)
    arguments = {"key": key, "micros": micros, "shielded": shielded, "fail": fails,
                 "gated": window in ("mid-work", "blocked-loop"), "blocking": window == "blocked-loop"}
    timeout = rng.randint(1, micros + 1) / 1e6 if window == "timeout" else None

    async def attempt() -> tuple[str, str | None]:
        try:
            result = await client.call_tool("work", arguments, timeout)
        except TimeoutError:
            return "cancelled", "timeout"
        return ("failed" if is_tool_error(result) else "ok"), None

    async def on_the_wire_then_wait() -> None:
        await wire.request_sent(key)
        await anyio.sleep((micros if window == "about-return" else 0) / 1e6)

    async def held_at_the_gate() -> None:
        await wire.request_sent(key)
        await until(lambda: gates.started(key))

    if window in ("timeout", "never"):
        call.got, call.reason = await attempt()
    elif window == "mid-work":  # the handler holds at its gate until the server has read the cancel
        call.got, call.reason = await cancel_when(held_at_the_gate, attempt) or ("cancelled", "caller")
        request_id = wire.id_of[key]
        await until(lambda: request_id in wire.cancels)
        await client.ping()
        gates.open(key)
    elif window == "blocked-loop":  # the server reads the cancel only after it answered: they cross
        call.got, call.reason = await cancel_when(held_at_the_gate, attempt) or ("cancelled", "caller")
        request_id = wire.id_of[key]
        await until(lambda: request_id in wire.cancels)
        gates.open(key)
    else:
        call.got, call.reason = await cancel_when(on_the_wire_then_wait, attempt) or ("cancelled", "caller")
    return call


def server_truth(call: Call, answers: list[Any], finished: set[str]) -> tuple[str, list[str]]:
    """What the server span must say: the outcome its answer on the wire gives, and its events."""
    results = [answer for answer in answers if is_result(answer)]
    if results:
        return ("failed" if results[0].result.get("isError") else "ok"), []
    events = [CANCEL_EVENT] + ([GHOST_EVENT] if call.key in finished else [])
    return "cancelled", events


@pytest.mark.parametrize("transport", ["memory", "stdio"])
async def test_randomized_cancels_agree_with_ground_truth_on_both_ends(
    framework, monkeypatch, sink, tmp_path, transport
) -> None:
    wire = Wire(key_of)
    gates = Gates(tmp_path / "gates")
    gates.directory.mkdir()
    courtesy_cancel = {"OTEL_PYTHON_MCP_CANCEL_COURTESY_CANCEL": "on"}
    with instrumented(monkeypatch, **courtesy_cancel) as captured, (tmp_path / "server.log").open("w") as server_log:
        if transport == "memory":
            server = in_process(captured, gates, framework)
        else:
            server = over_stdio(sink, tmp_path, gates, server_log, framework)
        async with sdk_client(wire.between(server.transport())) as client:
            await client.list_tools()  # 1.x validates results against a listed schema: fetch it once, now
            keys = iter(range(1, CALLS + 1))
            calls: dict[str, Call] = {}

            async def worker() -> None:
                for index in keys:
                    calls[str(index)] = await one_call(client, wire, gates, index, server.windows)

            async with anyio.create_task_group() as tg:
                for _ in range(IN_FLIGHT):
                    tg.start_soon(worker)
            # Every request settles (answered, acknowledged, or ended unanswered) and its span is reported;
            # an answer written before the last call's is on the wire before it.
            await until(lambda: len(server.spans()) == CALLS, 60)
            last = await client.call_tool("work", {"key": "last", "micros": 0, "shielded": False})
            assert not is_tool_error(last)  # the server still answers
            await until(lambda: len(server.spans()) == CALLS + 1, 60)
            with anyio.move_on_after(30):  # the ghost counter is exported on its own schedule
                while server.ghosts_counted() != sum(GHOST_EVENT in [n for n, _ in s.events]
                                                     for s in server.spans()) + len(server.crossed()):
                    await anyio.sleep(0.05)
            finished = server.finished()
            crossed = server.crossed()
            server_spans = server.spans()
            ghosts_counted = server.ghosts_counted()
        client_spans = [s for s in captured.of_kind(SpanKind.CLIENT) if s.name == "tools/call work"]
        late_answers = {span.attributes["jsonrpc.request.id"]: span.attributes["tool.handler_outcome"]
                        for span in captured.spans.get_finished_spans()
                        if span.name == "tool.ghost_response" and span.attributes["tool.ghost_kind"] == "late_answer"}
        late_counted = sum(point.value for point in captured.points("tool.ghost_responses")
                           if point.attributes["tool.ghost_kind"] == "late_answer")
        assert len(LIVE) == len(LIVE_SESSIONS) == client_transports.open_count() == 0

    client_span_of = {span.attributes["jsonrpc.request.id"]: span for span in client_spans}
    server_span_of = {span.attributes["jsonrpc.request.id"]: span for span in server_spans}
    assert len(client_spans) == len(client_span_of) == CALLS + 1, "one client span per call"
    assert len(server_spans) == len(server_span_of) == CALLS + 1, "one server span per call"

    ghosts = crossings = 0
    for key, call in calls.items():
        request_id = wire.id_of[key]
        answers = wire.answers.get(request_id, [])
        assert len(answers) <= 1 and all(is_result(a) or is_error(a, 0) for a in answers), (call, answers)
        client_span, server_span = client_span_of[str(request_id)], server_span_of[str(request_id)]
        assert client_span.end_time is not None
        context = f"{call} answers={answers}"

        client_events = [(e.name, dict(e.attributes)) for e in client_span.events]
        assert client_span.attributes["tool.outcome"] == call.got, (context, client_span.attributes)
        assert client_events == ([(CANCEL_EVENT, {"tool.cancel_reason": call.reason})] if call.reason else []), context
        assert client_span.attributes.get("tool.cancel_reason") == call.reason, context  # searchable as well
        assert (call.got == "cancelled") == (request_id in wire.cancels), context  # the cancel reached the server

        outcome, events = server_truth(call, answers, finished)
        assert server_span.attributes["tool.outcome"] == outcome, (context, server_span)
        ours = [name for name, _ in server_span.events if name != "exception"]  # FastMCP records the tool's raise
        assert ours == events, (context, server_span)
        if GHOST_EVENT in events:
            ghosts += 1
            ghost_attributes = dict(server_span.events)[GHOST_EVENT]
            assert ghost_attributes["tool.handler_outcome"] == ("failed" if call.fails else "ok"), context
        # A ghost's facts are span attributes too, and a span without them is not a ghost.
        ghost_keys = ("tool.handler_outcome", "tool.ghost_risk", "tool.ghost_kind")
        ghost_facts = {key: server_span.attributes.get(key) for key in ghost_keys}
        assert ghost_facts == (dict(server_span.events)[GHOST_EVENT] if GHOST_EVENT in events else
                               dict.fromkeys(ghost_keys)), context
        if CANCEL_EVENT in events:
            reason = dict(server_span.events)[CANCEL_EVENT]["tool.cancel_message"]
            assert reason.startswith("timed out") if call.reason == "timeout" else reason == "caller cancelled"

        # Answered, and its cancel reached the server after: the cancel crossed the answer.
        crossing = request_id in wire.cancels and any(is_result(answer) for answer in answers)
        assert (str(request_id) in crossed) == crossing, context
        crossings += str(request_id) in crossed
        # The client gave up and a result came after: a late answer it threw away. Exactly so where the server's
        # blocked loop answered long after the cancel; elsewhere the result may have come as the caller gave up.
        late_result = call.got == "cancelled" and any(is_result(answer) for answer in answers)
        late = late_answers.get(str(request_id))
        assert (late is not None) <= late_result, context
        if call.window == "blocked-loop":
            assert (late is not None) == SEES_LATE_ANSWERS, context
        if late is not None:
            assert late == ("failed" if call.fails else "ok"), context

        # One trace: the server's span is the child of the client's.
        assert server_span.trace_id == f"{client_span.context.trace_id:032x}", context
        assert server_span.parent_span_id == f"{client_span.context.span_id:016x}", context

    assert ghosts_counted == ghosts + crossings and len(crossed) == crossings
    assert late_counted == len(late_answers)
    ends = Counter((call.got, server_span_of[str(wire.id_of[key])].attributes["tool.outcome"])
                   for key, call in calls.items())
    gave_up = sum(n for (got, _), n in ends.items() if got == "cancelled")
    print(f"\nend-to-end race, mcp {MCP_MAJOR}.x over {transport}, {CALLS} calls, seed {SEED}: "
          f"callers gave up on {gave_up}; the server cancelled {ends['cancelled', 'cancelled']} of them "
          f"({ghosts} ghosts) and had answered {gave_up - ends['cancelled', 'cancelled']} first "
          f"({crossings} cancels crossed the answer; {len(late_answers)} late answers on the client); "
          f"uncancelled: ok {ends['ok', 'ok']}, failed {ends['failed', 'failed']}")
    # Every window was exercised, and the races produced every kind of ending on the server; a call
    # cancelled mid-work is cancelled on both ends, and a ghost exactly when its work was shielded.
    assert {call.window for call in calls.values()} == set(server.windows)
    assert ghosts > 0 and {outcome for _, outcome in ends} == {"ok", "failed", "cancelled"}
    for key, call in calls.items():
        if call.window == "mid-work":
            server_span = server_span_of[str(wire.id_of[key])]
            assert (call.got, server_span.attributes["tool.outcome"]) == ("cancelled", "cancelled"), call
            assert (GHOST_EVENT in [name for name, _ in server_span.events]) == call.shielded, call
