"""Concurrent sessions with faults, checked against ground truth from outside the plugin.

    python benchmarks/truth.py                          # 80 sessions, 5,000 calls, a 10 s exporter outage
    python benchmarks/truth.py --client-plugin          # the callers' side instrumented too (in this process)
    python benchmarks/truth.py --smoke                  # 8 sessions, 240 calls, a 1 s outage (CI's long run)

`truth_server.py` serves streamable HTTP under uvicorn and `opentelemetry-instrument` (the plugin on, traces,
metrics and logs over OTLP/HTTP to a receiver in this process). The sessions run in this process on the line
installed here: on mcp 2.x a fifth of them in the client's default 2026-07-28 mode, the rest legacy sessions; on
mcp 1.x legacy sessions. Each call is, at random (seeded): ok, a tool error, a JSON-RPC error, a write its caller's
timeout gives up on around the moment it ends, a shielded write its caller cancels at a random moment, or a call
whose caller drops its whole session mid-call. Mid-run the receiver stops for `--outage` seconds; last, calls are
started and the server gets SIGTERM with them in flight.

Ground truth: what each caller saw; the handlers' own log (each begins by logging the span it runs in, and logs
again as it ends); the rows the writes committed. Checked, and printed as mismatches by kind (exit 1 if any):
every call whose handler began has exactly one server span, with the outcome its caller saw (a caller that gave
up: `cancelled`, or answered with a ghost on it); a ghost for every call whose caller gave up while its handler
finished, and for no other; metric counts equal span counts by tool and outcome; the ghost counter equals the
ghosts on spans and the WARNINGs; no plugin log line on the server's stderr; no client crash. The one limit the
docs name is counted apart, not as a mismatch: on the 2026-07-28 revision an answer written into a connection
its caller closes a moment later, unread, is a ghost neither the server nor (uninstrumented) the caller sees.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from examples.otlp_sink import OtlpSink, exporter_environment  # noqa: E402
from tests.sdk_client import SdkClient, SdkError, sdk_client  # noqa: E402
from tests.subprocess_servers import free_port, http_streams, instrumented_script, wait_for_port  # noqa: E402
from tests.support import MCP_MAJOR  # noqa: E402

SCOPE = "otel_mcp_cancel"
GHOST_LINE = "mcp.ghost_response.suppressed_after_cancel_ack"
BEHAVIOURS = {"ok": 40, "tool_error": 10, "rpc_error": 5, "timeout": 20, "cancel": 20, "drop": 5}
OK, TOOL_ERROR, RPC_ERROR, GAVE_UP = "ok", "tool_error", "rpc_error", "gave_up"


@dataclass
class Call:
    key: str
    behaviour: str
    modern: bool
    saw: str = ""
    code: int | None = None  # the JSON-RPC error's, if it saw one

    cancel_sent: bool = False  # its client wrote a `notifications/cancelled` for it

    @property
    def left_uncancelled(self) -> bool:
        """No cancel of it surely reached the server: none was sent, or its session was torn down with it."""
        return not self.cancel_sent or self.behaviour == "drop"


class SentMessages:
    """A client session's write stream, noting what the SDK's client sends: which call each request id is, and
    the calls it sent a cancel for (ground truth from the client's side of the wire)."""

    def __init__(self, stream: Any, calls: dict[str, Call]) -> None:
        self._stream, self._calls, self._keys = stream, calls, {}

    async def send(self, item: Any) -> None:
        message = getattr(item.message, "root", item.message)  # mcp 1.x wraps it in a root model
        params = getattr(message, "params", None) or {}
        method = getattr(message, "method", None)
        if method == "tools/call":
            self._keys[getattr(message, "id", None)] = (params.get("arguments") or {}).get("key")
        elif method == "notifications/cancelled":
            call = self._calls.get(self._keys.get(params.get("requestId")))
            if call is not None:
                call.cancel_sent = True
        await self._stream.send(item)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def __aenter__(self) -> SentMessages:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._stream.__aexit__(*exc_info)


@asynccontextmanager
async def session(url: str, modern: bool, calls: dict[str, Call]) -> AsyncIterator[SdkClient]:
    if MCP_MAJOR == 2 and modern:
        from mcp import Client

        async with Client(url) as client:  # the client's default: the 2026-07-28 revision, a POST a request
            yield SdkClient(client)  # it sends no cancel: a give-up closes the POST
    else:
        async with sdk_client(_recorded(url, calls)) as client:
            yield client


@asynccontextmanager
async def _recorded(url: str, calls: dict[str, Call]) -> AsyncIterator[tuple[Any, Any]]:
    async with http_streams(url) as (read_stream, write_stream):
        yield read_stream, SentMessages(write_stream, calls)


class Run:
    def __init__(self, url: str, rng: random.Random, crashes: list[str]) -> None:
        self.url, self.rng, self.crashes = url, rng, crashes
        self.calls: list[Call] = []
        self.by_key: dict[str, Call] = {}

    async def session_worker(self, index: int, calls: int, modern: bool) -> None:
        made = 0
        while made < calls:
            with anyio.CancelScope() as dropped:
                try:
                    async with session(self.url, modern, self.by_key) as client:
                        while made < calls:
                            made += 1
                            await self.one_call(client, Call(f"s{index}c{made}", self.pick(), modern), dropped)
                except Exception as exc:  # anything but what a caller expects is a crash of the client
                    self.crashes.append(f"session {index}: {_leaves(exc)}")
                    await anyio.sleep(0.05)

    def pick(self) -> str:
        return self.rng.choices(list(BEHAVIOURS), weights=list(BEHAVIOURS.values()))[0]

    async def one_call(self, client: SdkClient, call: Call, dropped: anyio.CancelScope) -> None:
        self.calls.append(call)
        self.by_key[call.key] = call
        delay = self.rng.uniform(0.01, 0.05)
        call.saw = GAVE_UP  # until it learns otherwise
        try:
            if call.behaviour == "ok":
                await client.call_tool("write", {"key": call.key, "delay": self.rng.uniform(0, 0.005)})
            elif call.behaviour == "tool_error":
                result = await client.call_tool("broken", {"key": call.key})
                call.saw = TOOL_ERROR if getattr(result, "is_error", None) or getattr(result, "isError", None) else OK
                return
            elif call.behaviour == "rpc_error":
                await client.get_prompt("no_such_prompt", {})
            elif call.behaviour == "timeout":
                await client.call_tool("write", {"key": call.key, "delay": delay},
                                       timeout=delay * self.rng.uniform(0.6, 1.4))
            elif call.behaviour == "cancel":
                with anyio.move_on_after(delay * self.rng.uniform(0.2, 1.6)):
                    await client.call_tool("shielded", {"key": call.key, "delay": delay})
                    call.saw = OK
                return
            else:  # drop: the caller's whole session goes mid-call
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_cancel_after, dropped, delay * self.rng.uniform(0.2, 1.6))
                    await client.call_tool("shielded", {"key": call.key, "delay": delay})
                    call.saw = OK
                    tg.cancel_scope.cancel()
                return
            call.saw = OK
        except TimeoutError:
            call.saw = GAVE_UP
        except SdkError as error:
            call.saw, call.code = RPC_ERROR, error.error.code


def _leaves(error: BaseException) -> str:
    """An exception group's innermost exceptions, each with where it was raised."""
    inner = getattr(error, "exceptions", None)  # an exception group (anyio's backport before Python 3.11)
    if isinstance(inner, tuple):
        return "; ".join(map(_leaves, inner))
    frame = traceback.extract_tb(error.__traceback__)[-1:] if error.__traceback__ else []
    where = f" at {frame[0].filename.rsplit('/', 3)[-1]}:{frame[0].lineno}" if frame else ""
    return f"{type(error).__name__}: {error}{where}"


async def _cancel_after(scope: anyio.CancelScope, seconds: float) -> None:
    await anyio.sleep(seconds)
    scope.cancel()


async def drive(url: str, options: argparse.Namespace, sink: OtlpSink, port: int, crashes: list[str],
                directory: Path) -> Run:
    run = Run(url, random.Random(options.seed), crashes)
    per_session = max(1, options.calls // options.sessions)

    back: list[int] = []

    async def outage() -> None:
        await anyio.sleep(options.outage_at)
        sink.stop()
        await anyio.sleep(options.outage)
        back.append(len(sink.points))
        sink.start(port)

    async with anyio.create_task_group() as tg:
        tg.start_soon(outage)
        async with anyio.create_task_group() as sessions:
            for index in range(options.sessions):
                modern = MCP_MAJOR == 2 and index % 5 == 4
                sessions.start_soon(run.session_worker, index, per_session, modern)
    # The exporters back off while the receiver is down, and a batch still waiting to be sent again is dropped as
    # the server stops: SIGTERM comes once they delivered again (every call's span), as in a run whose outage
    # ends well before its server stops.
    waited = time.monotonic()
    with anyio.move_on_after(180):
        while not back or len(sink.points) == back[0] or not delivered(sink, directory):
            await anyio.sleep(0.1)
    print(f"after the outage, the exporters delivered everything {time.monotonic() - waited:.1f} s after the calls")
    return run


def delivered(sink: OtlpSink, directory: Path) -> bool:
    """Every call's span is in, and a WARNING for every ghost on those spans."""
    spans = list(sink.spans)
    if not began_spans(directory) <= {span.span_id for span in spans}:
        return False
    ghosts = sum(span.scope == SCOPE and "tool.ghost_kind" in span.attributes for span in spans)
    return sum(str(log.body).startswith(GHOST_LINE) for log in list(sink.logs)) >= ghosts


def began_spans(directory: Path) -> set[str]:
    """The spans the handlers began in, as their log says."""
    return {line.split()[2] for line in log_lines(directory) if line.startswith("began ")}


async def in_flight_at_sigterm(url: str, server: subprocess.Popen, directory: Path, count: int) -> list[Call]:
    """Calls begun, then the server gets SIGTERM with them in flight."""
    calls = [Call(f"term{index}", "sigterm", False) for index in range(count)]

    async def caller(call: Call) -> None:
        call.saw = GAVE_UP  # the server went: no answer (mcp 1.x's client may wait on a dead server: bounded)
        with anyio.move_on_after(30):
            try:
                async with session(url, False, {}) as client:
                    await client.call_tool("write", {"key": call.key, "delay": 3})
                    call.saw = OK
            except Exception:
                pass

    async with anyio.create_task_group() as tg:
        for call in calls:
            tg.start_soon(caller, call)
        with anyio.fail_after(30):
            while sum(f"began {call.key} " in line for line in log_lines(directory) for call in calls) < count:
                await anyio.sleep(0.05)
        server.send_signal(signal.SIGTERM)
    return calls


def log_lines(directory: Path) -> list[str]:
    path = directory / "handlers.log"
    return path.read_text().splitlines() if path.exists() else []


def check(calls: list[Call], directory: Path, sink: OtlpSink, stderr: str, crashes: list[str]) -> Counter:
    mismatches: Counter = Counter()
    examples: dict[str, str] = {}

    def mismatch(kind: str, detail: str) -> None:
        mismatches[kind] += 1
        examples.setdefault(kind, detail)

    began, ended = {}, set()
    for line in log_lines(directory):
        fields = line.split()
        if fields[0] == "began":
            began[fields[1]] = fields[2]
        else:
            ended.add(fields[1])
    rows = {key for (key,) in sqlite3.connect(directory / "rows.db").execute("select key from rows")}
    spans = [span for span in sink.spans if span.scope == SCOPE]
    calls_by_span = [span for span in spans if span.kind == "SERVER" and span.name.startswith("tools/call")]
    by_id = Counter(span.span_id for span in calls_by_span)
    served = {span.span_id: span for span in calls_by_span}
    ghost_children = {span.parent_span_id for span in spans if span.name == "tool.ghost_response"}
    unseen: Counter = Counter()
    for call in calls:
        if call.key not in began:
            if call.saw in (OK, TOOL_ERROR) and call.behaviour != "rpc_error":
                mismatch("answered_with_no_handler", call.key)
            continue
        span_id = began[call.key]
        if by_id[span_id] != 1:
            mismatch("no_span" if by_id[span_id] == 0 else "spans_per_call", f"{call.key} {call.saw}")
            continue
        span = served[span_id]
        outcome = span.attributes.get("tool.outcome")
        ghost = "tool.ghost_kind" in span.attributes or span_id in ghost_children
        completed = call.key in ended
        if (call.key in rows) != (completed and call.behaviour != "tool_error"):
            mismatch("truth_itself", call.key)
        if call.saw == OK and (outcome, ghost) != ("ok", False):
            mismatch("ok_call", f"{call.key}: {outcome} ghost={ghost}")
        elif call.saw == TOOL_ERROR and (outcome, ghost) != ("failed", False):
            mismatch("tool_error_call", f"{call.key}: {outcome} ghost={ghost}")
        elif call.saw in (GAVE_UP, RPC_ERROR):
            if ghost and not completed:
                mismatch("ghost_without_work", f"{call.key}: {call.behaviour}")
            elif not ghost and completed:
                if call.left_uncancelled and outcome in ("ok", "failed"):
                    unseen["2026-07-28" if call.modern else "legacy sessions"] += 1  # the documented limit
                else:
                    mismatch("missed_ghost", f"{call.key}: {call.behaviour} {outcome}")
            elif not ghost and outcome != "cancelled":
                mismatch("gave_up_call", f"{call.key}: {call.behaviour} {outcome} {span.attributes.get('error.type')}")
    # A JSON-RPC error, by its code, as the callers saw it and the spans say.
    refused = Counter(span.attributes.get("error.type") for span in spans
                      if span.kind == "SERVER" and span.name == "prompts/get")
    told = Counter(str(call.code) for call in calls if call.behaviour == "rpc_error" and call.saw == RPC_ERROR)
    if refused != told:
        mismatch("rpc_error_calls", f"spans {dict(refused)}, callers {dict(told)}")
    # One string end to end: points by tool and outcome, as the spans say.
    by_outcome = Counter((span.attributes.get("gen_ai.tool.name"), span.attributes.get("tool.outcome"))
                         for span in calls_by_span)
    points = Counter()
    for point in sink.latest_points("mcp.server.operation.duration"):
        if point.attributes.get("mcp.method.name") == "tools/call":
            points[(point.attributes.get("gen_ai.tool.name"), point.attributes.get("tool.outcome"))] += point.value
    if points != by_outcome:
        mismatch("points_vs_spans", f"points {dict(points)} spans {dict(by_outcome)}")
    ghosts = sum("tool.ghost_kind" in span.attributes for span in calls_by_span) + len(
        [span for span in spans if span.name == "tool.ghost_response"])
    counted = sum(point.value for point in sink.latest_points("tool.ghost_responses"))
    warned = sum(str(log.body).startswith(GHOST_LINE) for log in sink.logs)
    if not ghosts == counted == warned:
        mismatch("ghost_counts", f"spans {ghosts}, counter {counted}, WARNINGs {warned}")
    # The plugin's own log: its records (the logger is its package's), and anything it printed.
    for record in sink.logs:
        if record.scope == SCOPE and not str(record.body).startswith(GHOST_LINE):
            mismatch("plugin_log_line", str(record.body)[:300])
    for line in stderr.splitlines():
        if line.startswith(SCOPE):
            mismatch("plugin_log_line", line[:300])
    for crash in crashes:
        mismatch("client_crash", crash[:300])
    crossings = [call for call in calls if call.saw == GAVE_UP and call.key in ended]
    print(f"{len(calls)} calls ({dict(Counter(call.saw for call in calls))}); {len(began)} handlers began, "
          f"{len(ended)} ended; {len(calls_by_span)} tools/call spans; {ghosts} ghosts for {len(crossings)} "
          f"calls given up on whose handlers ended")
    for where, count in sorted(unseen.items()):
        of = sum(call.modern == (where == "2026-07-28") for call in crossings)
        print(f"{where}: {count} of {of} such calls had no ghost on the server: its answer went out on an open "
              "connection, and its caller, with no cancel, left without reading it or threw it away (docs/ghosts.md)")
    for kind, count in sorted(mismatches.items()):
        print(f"MISMATCH {kind}: {count} (e.g. {examples[kind]})")
    print(f"mismatches: {sum(mismatches.values())}")
    return mismatches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=80)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--outage", type=float, default=10.0, help="seconds the receiver is down, mid-run")
    parser.add_argument("--sigterm-calls", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--client-plugin", action="store_true", help="instrument this process's clients too")
    parser.add_argument("--smoke", action="store_true", help="8 sessions, 240 calls, a 1 s outage")
    options = parser.parse_args()
    if options.smoke:
        options.sessions, options.calls, options.outage, options.sigterm_calls = 8, 240, 1.0, 4
    if options.client_plugin:
        from otel_mcp_cancel import McpCancelInstrumentor

        McpCancelInstrumentor().instrument()  # the global no-op providers: its code runs, nothing is kept
    directory = Path(tempfile.mkdtemp(prefix="truth-"))
    sink = OtlpSink().start()
    sink_port = int(sink.endpoint.rsplit(":", 1)[1])
    port = free_port()
    environment = {**os.environ, **exporter_environment(sink.endpoint), "OTEL_LOGS_EXPORTER": "otlp_proto_http",
                   "OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED": "true", "OTEL_SERVICE_NAME": "truth",
                   # Sized above the outage, as for a collector's restarts: the OTLP exporter gives up a batch it
                   # has retried for this long (10 s by default), and a longer outage loses it, the SDK's loss.
                   "OTEL_EXPORTER_OTLP_TIMEOUT": str(int(options.outage) + 20)}
    with open(directory / "stderr", "w") as stderr:
        server = subprocess.Popen(instrumented_script(HERE / "truth_server.py", str(directory), str(port)),
                                  env=environment, stdout=subprocess.DEVNULL, stderr=stderr)
    crashes: list[str] = []
    try:
        wait_for_port(port, server)
        url = f"http://127.0.0.1:{port}/mcp"
        options.outage_at = 2.0 if options.smoke else 10.0
        started = time.monotonic()
        run = anyio.run(drive, url, options, sink, sink_port, crashes, directory)
        print(f"{len(run.calls)} calls in {time.monotonic() - started:.1f} s over {options.sessions} sessions "
              f"(mcp {MCP_MAJOR}.x)")
        run.calls += anyio.run(in_flight_at_sigterm, url, server, directory, options.sigterm_calls)
        server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
    time.sleep(1.0)  # the last export, as the server exited, is in
    mismatches = check(run.calls, directory, sink, (directory / "stderr").read_text(), crashes)
    sink.stop()
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
