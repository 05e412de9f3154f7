"""The plugin's own CPU per tools/call, against the floor: what the OpenTelemetry SDK itself charges for the
same telemetry (2 spans and 2 histogram records, with the same attributes).

    python benchmarks/hot_path.py [--calls 300] [--blocks 12] [--rounds 3]   # on the installed mcp line
    python benchmarks/hot_path.py --goal --calls 50 --blocks 30 --rounds 16   # the goal's ratio alone, many rounds
    python benchmarks/hot_path.py --profile plugin                            # cProfile of one block, top 30
    python benchmarks/hot_path.py --opcodes --calls 50                       # Python bytecodes per call, by package
    python benchmarks/hot_path.py --before /tmp/old/src                       # also another checkout's plugin
    python benchmarks/hot_path.py --memory 100000                             # resident memory over 100,000 calls
    python benchmarks/hot_path.py --instructions --calls 50                   # instructions per call (valgrind)
    python benchmarks/hot_path.py --instructions --caches --calls 50         # and what caches make of them
    python benchmarks/hot_path.py --in-flight 1,100,1000 --calls 1000        # added CPU with many calls in flight
    python benchmarks/hot_path.py --instructions --in-flight 1,1000 --calls 1000  # and added instructions
    python benchmarks/hot_path.py --user-hooks ...                            # the plugin with (no-op) user hooks

Client and server run in one process over memory streams: the full JSON-RPC path, no IPC noise. Each
round is a fresh process (`--before`: one more, importing the plugin from that checkout) that runs the
modes in blocks of `--calls` tools/calls, interleaved (the order reversed every other block), so that
drift on a shared machine hits every mode alike; each block opens a fresh session, and what the process
set up is collected and frozen after the first (warming) pass, so that no full collection in a block
traverses it (a counted block too: see `settled`). A block's cost is the
process's CPU time (every thread: the exporter's too) per call, and what the calls queued is exported
(flushed) inside it:
- `none`: no plugin, no telemetry;
- `plugin`: the plugin on both ends (instrument() before the block, uninstrument() after), with SDK
  providers as production runs them: batch span processor, periodic metric reader, OTLP/HTTP to a
  receiver in the parent process;
- `no-op`: the plugin on both ends with no-op providers (as with `OTEL_SDK_DISABLED=true`): what it costs
  when nothing records (it should step aside);
- `in situ`: no plugin; the same providers, and once per tools/call, as it returns, the SDK's own calls
  for what the plugin records per call: a SERVER and a CLIENT span with the attributes ours carry and
  their outcome, each span current while it is open (as `start_as_current_span` makes it), and one record
  in each duration histogram in its span's context (so with the exemplar ours carry). The floor as the
  traffic around it leaves the CPU's caches: the same calls cost about twice as much here as in a loop of
  nothing else;
- `in place`: no plugin; the same SDK calls, each made where an instrumentation has to make it: the CLIENT
  span's start before each call and its end (outcome, record, end) as it returns, the SERVER span's around
  the server's tools/call handler (a plain closure the handler is registered behind, nothing else). The
  same instructions as `in situ`, spread through the request as the plugin's are, amid mcp's own work;
- `in place, propagated`: `in place` plus the trace context a cross-process trace cannot do without, made
  where it must be: the client injects its span's context into the call's `_meta` (the SDK's `meta=`
  argument, so the request carries it at the SDK's own charge), the server extracts it from the request's
  `_meta` as its handler gets it and starts its span there. The floor the goal is measured against: every
  instrumentation that joins client and server spans pays for it;
- `loop`: the same SDK calls in a loop of nothing else (the floor as issue #17 first measured it);
- `plugin, spans only`: the plugin with a no-op meter provider: its spans, outcomes and ghosts, no metrics,
  the work of the other instrumentations, which record none;
- each other instrumentation of MCP installed that runs on this line (`benchmarks/peers.py`: mcp 2.x's own
  spans, Traceloop, OpenInference, logfire), on for its block and off after it, exporting through the same
  processor; the spans every mode made per call are counted, and reported beside what each adds.
`plugin adds` = plugin − none, paired block by block; the ratios to report are the medians' ratios,
plugin adds / in situ adds, plugin adds / in place adds, plugin adds / in place, propagated adds (the goal's,
with its 95% interval: a bootstrap over the rounds and the pairs in each, and each round's own ratio), and
plugin adds / loop. `--goal` runs only `none`, `plugin` and the propagated floor, so that a run can afford many
rounds: a process's figure strays far from the next one's on mcp 1.x, and only many processes settle it.
`--instructions` also counts `plugin, no propagation` (the plugin with no propagator, as with
`OTEL_PROPAGATORS=none`): what the plugin's count exceeds it by is what trace propagation costs it.
`--instructions --caches` counts `none`, `plugin` and the propagated floor under valgrind's cache and branch
simulation: the first-level instruction-cache and data-cache misses, the misses of the core's own L2 (simulated as
the last level: what goes past the core), and the branch mispredictions each adds, which a count of instructions
does not see and CPU time does. `--opcodes` counts the Python bytecodes the main thread runs per call in
`none`, `plugin` and the propagated floor, by the package whose code runs them (a trace function: what C does
for them is not counted): where the plugin's surplus over the floor is, line by line of Python.
A run fails if the span processor dropped a span: a floor that exports less than it records is no floor.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import functools
import gc
import importlib.metadata
import inspect
import io
import json
import logging
import os
import pstats
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from benchmarks.peers import PEERS, Peer, memory_transport  # noqa: E402
from examples.otlp_sink import OtlpSink  # noqa: E402

PROPAGATED = "in place, propagated"
SPANS = "spans per call"
SPANS_ONLY = "plugin, spans only"  # with a no-op meter provider: the work of the peers that record no metrics
MODES = ("none", "plugin", "no-op", "in situ", "in place", PROPAGATED, "loop", SPANS_ONLY)
# The goal's ratio alone (`--goal`, so that many rounds fit; `--caches`, simulated): the plugin against the floor.
GOAL_MODES = ("none", "plugin", PROPAGATED)
WARM_UP = 50
FLUSH_EVERY = 256  # calls: 512 spans, one full export batch, well inside the span queue (2,048)
MCP_MAJOR = int(importlib.metadata.version("mcp").split(".")[0])
# The other instrumentations that run here, each a mode of its own (the others: why not, in the report).
PEER_OF = {peer.name: peer for peer in PEERS if peer.unavailable(MCP_MAJOR) is None}
USER_HOOKS = "HOT_PATH_USER_HOOKS"  # set (by --user-hooks) in a child's environment: the plugin runs with hooks


def title() -> str:
    hooks = ", the plugin with user hooks" if os.environ.get(USER_HOOKS) else ""
    return f"mcp {importlib.metadata.version('mcp')}{hooks}"


def user_hooks() -> dict[str, Any]:
    """`instrument()`'s hook arguments: a request_hook and a response_hook that do nothing, if asked for (what is
    measured is what the plugin pays to call them), else none."""
    if not os.environ.get(USER_HOOKS):
        return {}
    return {"request_hook": lambda span, request: None, "response_hook": lambda span, request, response: None}


SPAN_ENDS: Any = None  # the child's span_ends(), counting every provider's spans


def providers(endpoint: str) -> tuple[Any, Any]:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    global SPAN_ENDS
    SPAN_ENDS = SPAN_ENDS or span_ends()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
    tracer_provider.add_span_processor(SPAN_ENDS)
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics"))
    return tracer_provider, MeterProvider(metric_readers=[reader])


def flusher(tracer_provider: Any, meter_provider: Any) -> Callable[[], None]:
    """Exports what the providers hold now."""
    def flush() -> None:
        tracer_provider.force_flush()
        meter_provider.force_flush()

    return flush


def span_ends() -> Any:
    """A span processor counting the spans that end: how many a mode makes per call (`mark()` as its calls
    start, `measure(calls)` once they are exported)."""
    from opentelemetry.sdk.trace import SpanProcessor

    class SpanEnds(SpanProcessor):
        def __init__(self) -> None:
            self.count = self._at_mark = 0
            self.last_per_call = 0.0

        def mark(self) -> None:
            self._at_mark = self.count

        def measure(self, calls: int) -> None:
            self.last_per_call = (self.count - self._at_mark) / calls

        def on_end(self, span: Any) -> None:
            self.count += 1

    return SpanEnds()


class DroppedSpans(logging.Handler):
    """Counts the batch span processor's "Queue full, dropping" warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += "dropping" in record.getMessage()


# The client and the server, as each names itself in `initialize`: on the other end's spans and metrics.
IMPLEMENTATIONS = (("hot-path-client", "1.0"), ("hot-path", "1.0"))


class Floor:
    """The SDK's own work for one tools/call: 2 spans and 2 histogram records, with our attributes, in the order
    an instrumentation makes them: the CLIENT span starts, the SERVER span starts, the SERVER span gets its
    outcome, its record and ends, then the CLIENT span. Each span is current from its start to its end, as
    `start_as_current_span` makes it (mcp 2.x's own spans): what the caller's transport and the tool do
    meanwhile is traced beneath it. `one_call()` makes them all at once. `propagates`:
    the CLIENT span's context is injected into `meta`, for the request's `_meta`, and the SERVER span starts
    in the context extracted from the `_meta` its request carried."""

    def __init__(self, tracer_provider: Any, meter_provider: Any, propagates: bool = False) -> None:
        from mcp.types import LATEST_PROTOCOL_VERSION
        from opentelemetry.context import attach, detach
        from opentelemetry.propagate import extract, inject
        from opentelemetry.trace import SpanKind, get_current_span, set_span_in_context

        self._client_kind, self._server_kind, self._in_context = SpanKind.CLIENT, SpanKind.SERVER, set_span_in_context
        self._attach, self._detach = attach, detach
        self.propagates, self._inject, self._extract = propagates, inject, extract
        self.meta: dict[str, str] | None = None  # the trace context for the current call's `_meta`
        self._current_span = get_current_span
        self.unjoined = 0  # server spans that found no trace context in their request
        self._tracer = tracer_provider.get_tracer("floor")
        meter = meter_provider.get_meter("floor")
        self._server_duration = meter.create_histogram("mcp.server.operation.duration", unit="s")
        self._client_duration = meter.create_histogram("mcp.client.operation.duration", unit="s")
        self.negotiated(LATEST_PROTOCOL_VERSION)  # until a session says (`loop` has none)
        self._request_ids = iter(range(1 << 62))
        self._request: dict[str, str] = {}
        self._client: Any = None
        self._server: Any = None
        self._client_token: Any = None
        self._server_token: Any = None

    def negotiated(self, protocol_version: str) -> None:
        """The session's protocol version, which ours record as each span ends and on its metric, with each
        end's peer as it named itself (`IMPLEMENTATIONS`). The metrics' attributes are the same on every call:
        made once, as ours are."""
        (client, client_version), (server, server_version) = IMPLEMENTATIONS
        version = {"mcp.protocol.version": protocol_version}
        self._server_outcome = {**version, "mcp.client.name": client, "mcp.client.version": client_version,
                                "tool.outcome": "ok"}
        self._client_outcome = {**version, "mcp.server.name": server, "mcp.server.version": server_version,
                                "tool.outcome": "ok"}
        call = {"mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "echo"}
        self._server_metric = {**call, **version, "mcp.client.name": client, "tool.outcome": "ok"}
        self._client_metric = {**call, **version, "mcp.server.name": server, "tool.outcome": "ok"}

    def client_starts(self) -> None:
        self._request = {
            "mcp.method.name": "tools/call",
            "jsonrpc.request.id": str(next(self._request_ids)),
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "echo",
        }
        self._client = self._tracer.start_span("tools/call echo", kind=self._client_kind, attributes=self._request)
        in_context = self._in_context(self._client)
        self._client_token = self._attach(in_context)
        if self.propagates:
            self.meta = {}
            self._inject(self.meta, context=in_context)

    def server_starts(self, meta: Any = None) -> None:
        context = None
        if self.propagates:
            context = self._extract(meta or {})
            # As an instrumentation checks what it extracted (ours does): and a floor whose server spans did
            # not join their client's trace is no floor.
            self.unjoined += not self._current_span(context).get_span_context().is_valid
        self._server = self._tracer.start_span("tools/call echo", context=context, kind=self._server_kind,
                                               attributes=self._request)
        self._server_token = self._attach(self._in_context(self._server))

    def server_ends(self) -> None:
        server = self._server
        server.set_attributes(self._server_outcome)
        self._server_duration.record(0.001, self._server_metric)  # in its span's context: its exemplar, as ours
        server.end()
        self._detach(self._server_token)

    def client_ends(self) -> None:
        client = self._client
        client.set_attributes(self._client_outcome)
        self._client_duration.record(0.001, self._client_metric)
        client.end()
        self._detach(self._client_token)

    def one_call(self) -> None:
        self.client_starts()
        self.server_starts()
        self.server_ends()
        self.client_ends()


def serve_with_floor(lowlevel: Any, floor: Floor) -> None:
    """The server's tools/call handler, between its SERVER span's start and end (the floor's calls made where
    the request is served): a plain closure around the handler the framework registered, nothing else."""
    import mcp.types

    def around(handler: Callable[..., Any]) -> Callable[..., Any]:
        async def served(*args: Any, **kwargs: Any) -> Any:
            floor.server_starts(request_meta(args) if floor.propagates else None)
            try:
                return await handler(*args, **kwargs)
            finally:
                floor.server_ends()

        return served

    if MCP_MAJOR == 2:
        entry = lowlevel._request_handlers["tools/call"]
        lowlevel._request_handlers["tools/call"] = type(entry)(entry.params_type, around(entry.handler))
    else:
        handlers = lowlevel.request_handlers
        handlers[mcp.types.CallToolRequest] = around(handlers[mcp.types.CallToolRequest])


def request_meta(args: tuple[Any, ...]) -> Any:
    """The `_meta` of the tools/call request a handler was given: 2.x's handler gets (context, params), its
    `meta` a dict; 1.x's the request, whose `meta` keeps what the spec does not name as its extra fields."""
    if MCP_MAJOR == 2:
        return args[1].meta
    meta = args[0].params.meta
    return None if meta is None else meta.model_extra


async def call_with_meta(session: Any, arguments: dict[str, Any], meta: dict[str, str]) -> Any:
    """A tools/call carrying `meta` on a 1.x release whose `call_tool` takes none (before 1.2x): the request
    built as later releases' `call_tool` builds it."""
    from mcp import types

    params = types.CallToolRequestParams(name="echo", arguments=arguments, _meta=types.RequestParams.Meta(**meta))
    request = types.CallToolRequest(method="tools/call", params=params)
    return await session.send_request(types.ClientRequest(request), types.CallToolResult)


def loop_block(one_call: Callable[[], None], flush: Callable[[], None], calls: int) -> float:
    """CPU seconds per call for the floor's calls in a loop of nothing else (flushed as the exporter would:
    a full batch at a time, so no span is dropped)."""
    SPAN_ENDS.mark()
    started = time.process_time()
    for n in range(1, calls + 1):
        one_call()
        if n % FLUSH_EVERY == 0:
            flush()
    flush()
    seconds = (time.process_time() - started) / calls
    SPAN_ENDS.measure(calls)
    return seconds


async def traffic_block(
    calls: int,
    flush: Callable[[], None] | None,
    after_call: Callable[[], None] | None,
    every: tuple[int, Callable[[int], None]] | None = None,
    in_flight: int = 1,
    floor: Floor | None = None,
    peer: Peer | None = None,
) -> float:
    """CPU seconds per tools/call, the SDK's own client and server over memory streams; `flush()`, if given,
    runs inside the timing (what the calls left to export is part of their cost); `after_call()`, if given,
    runs as each call returns; `every` = (n, report): report(calls so far) after every n calls;
    `in_flight` > 1: the calls are made by that many concurrent callers on the one session (and neither
    `after_call` nor `every` is called); `floor`: its calls are made in place, the CLIENT span's around each
    call and the SERVER span's around the server's tools/call handler; `peer`: both ends' streams are wrapped
    as it wraps a transport's. The spans the calls made are counted in SPAN_ENDS."""
    import anyio
    from mcp.shared.memory import create_client_server_memory_streams

    try:
        from mcp.server.mcpserver import MCPServer as Server
    except ImportError:  # mcp 1.x
        from mcp.server.fastmcp import FastMCP as Server
    server = Server(IMPLEMENTATIONS[1][0], log_level="WARNING")  # 1.x logs each request at INFO: noise, not work

    @server.tool()
    async def echo(text: str) -> str:
        return text

    takes_meta: bool | None = None  # whether the session's call_tool takes `meta` (asked once, not per call)

    async def call(session: Any, text: str) -> None:
        if floor is None:
            await session.call_tool("echo", {"text": text})
            return
        floor.client_starts()
        if floor.meta is None:
            await session.call_tool("echo", {"text": text})
        elif takes_meta:
            await session.call_tool("echo", {"text": text}, meta=floor.meta)
        else:
            await call_with_meta(session, {"text": text}, floor.meta)
        floor.client_ends()

    async def timed(session: Any, protocol_version: str) -> float:
        nonlocal takes_meta
        if floor is not None:
            floor.negotiated(protocol_version)
        takes_meta = "meta" in inspect.signature(session.call_tool).parameters
        for _ in range(WARM_UP):
            await call(session, "warm")
        if flush is not None:
            flush()
        SPAN_ENDS.mark()
        started = time.process_time()
        if in_flight > 1:

            async def caller(share: int) -> None:
                for _ in range(share):
                    await session.call_tool("echo", {"text": "hello"})

            async with anyio.create_task_group() as callers:
                for n in range(in_flight):
                    callers.start_soon(caller, calls // in_flight + (1 if n < calls % in_flight else 0))
        else:
            for n in range(1, calls + 1):
                await call(session, "hello")
                if after_call is not None:
                    after_call()
                if every is not None and n % every[0] == 0:
                    every[1](n)
        if flush is not None:
            flush()
        seconds = (time.process_time() - started) / calls
        SPAN_ENDS.measure(calls)
        return seconds

    lowlevel = getattr(server, "_lowlevel_server", None) or server._mcp_server
    lowlevel.version = IMPLEMENTATIONS[1][1]
    from mcp.types import Implementation

    client_info = Implementation(name=IMPLEMENTATIONS[0][0], version=IMPLEMENTATIONS[0][1])
    if floor is not None:
        serve_with_floor(lowlevel, floor)
    def transport(read: Any, write: Any) -> Any:
        def streams() -> Any:
            return memory_transport(read, write)

        return streams() if peer is None else peer.transport(streams)

    async with create_client_server_memory_streams() as ((client_read, client_write), (server_read, server_write)):
        async with (transport(client_read, client_write) as (client_read, client_write),
                    transport(server_read, server_write) as (server_read, server_write),
                    anyio.create_task_group() as tg):
            tg.start_soon(lambda: lowlevel.run(server_read, server_write, lowlevel.create_initialization_options()))
            if MCP_MAJOR == 2:
                from mcp import Client

                @asynccontextmanager
                async def streams() -> Any:
                    yield client_read, client_write

                async with Client(streams(), mode="legacy", client_info=client_info) as session:
                    seconds = await timed(session, session.protocol_version)
            else:
                from mcp import ClientSession

                async with ClientSession(client_read, client_write, client_info=client_info) as session:
                    initialized = await session.initialize()
                    seconds = await timed(session, initialized.protocolVersion)
            tg.cancel_scope.cancel()
    return seconds


def block_runner(calls: int, endpoint: str) -> tuple[Callable[..., float], DroppedSpans]:
    """A function running one block of a mode in this process (`block(mode, in_flight=1)`: none, plugin and
    no-op take more than one call in flight), and the count of spans the SDK dropped."""
    import anyio
    from opentelemetry import propagate
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.propagators.composite import CompositePropagator
    from opentelemetry.trace import NoOpTracerProvider

    from otel_mcp_cancel import McpCancelInstrumentor

    dropped = DroppedSpans()
    logging.getLogger("opentelemetry").addHandler(dropped)
    tracer_provider, meter_provider = providers(endpoint)
    flush = flusher(tracer_provider, meter_provider)
    floor = Floor(tracer_provider, meter_provider)
    propagated_floor = Floor(tracer_provider, meter_provider, propagates=True)
    instrumentor = McpCancelInstrumentor()

    def block(mode: str, in_flight: int = 1) -> float:
        if mode == "none":
            return anyio.run(traffic_block, calls, None, None, None, in_flight)
        if mode == "in situ":
            return anyio.run(traffic_block, calls, flush, floor.one_call)
        if mode == "in place":
            return anyio.run(traffic_block, calls, flush, None, None, 1, floor)
        if mode == PROPAGATED:
            seconds = anyio.run(traffic_block, calls, flush, None, None, 1, propagated_floor)
            if propagated_floor.unjoined:
                raise SystemExit(f"{propagated_floor.unjoined} server spans of the propagated floor found no trace "
                                 "context: the measurement is void")
            return seconds
        if mode == "loop":
            return loop_block(floor.one_call, flush, calls)
        if mode in PEER_OF:
            peer = PEER_OF[mode]
            peer.on(tracer_provider, endpoint, SPAN_ENDS)

            def flush_all() -> None:
                flush()
                peer.flush()

            try:
                return anyio.run(traffic_block, calls, flush_all, None, None, 1, None, peer)
            finally:
                peer.off()
        if mode == "no-op":
            instrumentor.instrument(tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider())
        elif mode == SPANS_ONLY:
            instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=NoOpMeterProvider(), **user_hooks())
        else:
            instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider, **user_hooks())
        propagator = propagate.get_global_textmap()
        if mode == UNPROPAGATED:  # as with OTEL_PROPAGATORS=none: no trace context is sent, none is read
            propagate.set_global_textmap(CompositePropagator([]))
        try:
            return anyio.run(traffic_block, calls, flush, None, None, in_flight)
        finally:
            propagate.set_global_textmap(propagator)
            instrumentor.uninstrument()

    return block, dropped


def child(
    calls: int, blocks: int, endpoint: str, profile: str | None, modes: tuple[str, ...] = (*MODES, *PEER_OF)
) -> dict[str, list[float]]:
    """Each of `modes`' CPU seconds per call, block by block, in this one process (`--goal`: `GOAL_MODES`, so
    a round takes a third of the time of all of them)."""
    block, dropped = block_runner(calls, endpoint)

    if profile is not None:
        block(profile)  # warm: imports and first-use caches stay out of the profile
        profiler = cProfile.Profile()
        profiler.enable()
        block(profile)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(os.environ.get("PROFILE_FILTER", ""), 30)
        print(out.getvalue(), file=sys.stderr)
        return {}
    return interleaved({mode: (mode, 1) for mode in modes}, blocks, block, dropped)


def settled() -> None:
    """Collect, then freeze what is alive (imports, providers, sessions' set-up): no later collection
    traverses it. Python's full collections traverse the whole heap; one lands in a block now and then, and
    what it costs depends on the size of the process (a larger one with more packages imported) and on
    which block it lands in, not on the mode measured. Its young collections, and full ones over what the
    blocks themselves keep alive, still count."""
    gc.collect()
    gc.freeze()


def interleaved(
    runs: dict[str, tuple[str, int]], blocks: int, block: Callable[..., float], dropped: DroppedSpans
) -> dict[str, list[float]]:
    """Each run's (mode, calls in flight) CPU seconds per call, block by block, the runs interleaved (the order
    reversed every other pass); the first pass warms them all; and (as `spans per call@<run>`) the spans each
    block made per call. Void if the span processor dropped a span."""
    measured: dict[str, list[float]] = {key: [] for name in runs for key in (name, f"{SPANS}@{name}")}
    order = list(runs)
    for n in range(blocks + 1):
        if n == 1:
            settled()  # after the warming pass: what every mode set up stays out of every later collection
        for name in order if n % 2 == 0 else order[::-1]:
            gc.collect()
            seconds = block(*runs[name])
            if n > 0:
                measured[name].append(seconds)
                measured[f"{SPANS}@{name}"].append(SPAN_ENDS.last_per_call)
    if dropped.count:
        raise SystemExit(f"the span processor dropped spans ({dropped.count} warnings): the measurement is void")
    return measured


def count_child(calls: int, endpoint: str, mode: str) -> dict[str, list[float]]:
    """One block of `mode` (`mode@level`: with that many calls in flight), for the parent to count its
    instructions (this process runs under valgrind)."""
    block, dropped = block_runner(calls, endpoint)
    name, _, level = mode.partition("@")
    settled()
    block(name, int(level or 1))
    if dropped.count:
        raise SystemExit(f"the span processor dropped spans ({dropped.count} warnings): the count is void")
    return {}


def in_flight_child(calls: int, blocks: int, endpoint: str, levels: str) -> dict[str, list[float]]:
    """CPU seconds per call of `none` and `plugin` with each number of calls in flight, block by block,
    interleaved as in `child`."""
    block, dropped = block_runner(calls, endpoint)
    runs = {f"{mode}@{level}": (mode, int(level)) for level in levels.split(",") for mode in ("none", "plugin")}
    return interleaved(runs, blocks, block, dropped)


def memory_child(calls: int, endpoint: str) -> dict[str, list[float]]:
    """The plugin on both ends for `calls` calls in one session: resident memory (MiB) and the plugin's
    requests still held, after every tenth of them (each after a flush and a full collection)."""
    import anyio

    from otel_mcp_cancel import McpCancelInstrumentor
    from otel_mcp_cancel.request_state import LIVE

    tracer_provider, meter_provider = providers(endpoint)
    flush = flusher(tracer_provider, meter_provider)
    report: dict[str, list[float]] = {"calls": [], "rss_mib": [], "held": []}

    def sample(done: int) -> None:
        flush()
        gc.collect()
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        report["calls"].append(done)
        report["rss_mib"].append(pages * os.sysconf("SC_PAGE_SIZE") / 2**20)
        report["held"].append(len(LIVE))

    McpCancelInstrumentor().instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    anyio.run(traffic_block, calls, flush, None, (max(calls // 10, 1), sample))
    return report


# Where the bytecodes a call runs come from: the first of these found in a code object's file name, else "other".
OPCODE_PACKAGES = {
    "/otel_mcp_cancel/": "the plugin",
    "/opentelemetry/": "opentelemetry",
    "/mcp/": "mcp",
    "/pydantic": "pydantic",
    "/jsonschema": "jsonschema",
    "/anyio/": "anyio",
    "/asyncio/": "asyncio",
    "/wrapt/": "wrapt",
    f"/{Path(__file__).name}": "this benchmark (its calls, and the floor's)",
}


def opcodes_child(calls: int, endpoint: str, mode: str) -> dict[str, list[float]]:
    """The Python bytecodes this process's main thread runs per tools/call of `mode`, by the package whose code
    runs them, counted by a trace function (slow, and blind to what C does for them): a block of `calls` and one
    of 5x that, after a warming block each, so that start-up cancels in their difference."""
    counted: list[collections.Counter[str]] = []
    for n in (calls, 5 * calls):
        block, _ = block_runner(n, endpoint)
        block(mode)
        opcodes: collections.Counter[str] = collections.Counter()

        def trace(frame: Any, event: str, arg: Any) -> Any:
            if event == "call":
                frame.f_trace_opcodes = True
            elif event == "opcode":
                opcodes[frame.f_code.co_filename] += 1
            return trace

        sys.settrace(trace)
        try:
            block(mode)
        finally:
            sys.settrace(None)
        counted.append(opcodes)
    per_package: collections.Counter[str] = collections.Counter()
    for filename in counted[0].keys() | counted[1].keys():
        package = next((name for part, name in OPCODE_PACKAGES.items() if part in filename), "other")
        per_package[package] += (counted[1][filename] - counted[0][filename]) / (4 * calls)
    return {package: [per_call] for package, per_call in per_package.items()}


def run_child(
    job: str,
    calls: int,
    blocks: int,
    endpoint: str,
    mode: str | None = None,
    source: str | None = None,
    prefix: tuple[str, ...] = (),
    environment: dict[str, str] | None = None,
) -> tuple[dict[str, list[float]], str]:
    """One round (`job`: measure, profile, count or memory; `mode`: the one profiled or counted) in a fresh
    process, run under `prefix` if given; `source`: import the plugin from that checkout's src/ instead.
    Returns what it measured and what it printed on stderr."""
    command = [*prefix, sys.executable, __file__, "--child", job, str(calls), str(blocks), endpoint, mode or ""]
    environment = {**os.environ, **(environment or {}), **({"PYTHONPATH": source} if source else {})}
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, env=environment)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


UNPROPAGATED = "plugin, no propagation"  # counted only: what trace propagation costs is plugin minus this
INSTRUCTION_MODES = ("none", "plugin", "in situ", "in place", PROPAGATED, UNPROPAGATED, SPANS_ONLY)


# Under valgrind a call takes some 50 times as long: the SDK's export timers (5 s, 60 s) would fire inside blocks
# where natively they never do. Off, as natively, spans are exported a full batch at a time, and what is left at
# the block's flush (once per block: it cancels in the difference). A fixed hash seed: the same dict and set probes
# in every process.
VALGRIND_ENVIRONMENT = {"OTEL_BSP_SCHEDULE_DELAY": "3600000", "OTEL_METRIC_EXPORT_INTERVAL": "3600000",
                        "PYTHONHASHSEED": "0"}
COUNTED = {"instructions": r"I\s+refs"}
# And what the CPU's caches and branch predictor make of them, as cachegrind simulates them (this CPU's first-level
# cache sizes where it can read them, the last level as `core_cache` says; a simple branch predictor of its own).
SIMULATED = {**COUNTED, "I1 misses": r"I1\s+misses", "D1 misses": r"D1\s+misses", "LL misses": r"LL\s+misses",
             "mispredicts": r"Mispredicts"}
CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


@functools.cache  # read once: the simulation's options and its report's header both ask
def core_cache() -> tuple[int, int, int] | None:
    """This core's own last cache (L2: size, ways, line bytes, as the kernel tells them), simulated as cachegrind's
    last level (LL): its misses are what goes past the core to the cache it shares with other cores, and on a
    virtual machine with other machines. None where the kernel does not tell it or cachegrind cannot simulate it
    (a power of two sets): cachegrind's own choice, this CPU's last level, stands."""
    try:
        level2 = next(index for index in CPU_CACHES.glob("index*") if (index / "level").read_text().strip() == "2")
        size = int((level2 / "size").read_text().strip().rstrip("K")) * 1024
        ways = int((level2 / "ways_of_associativity").read_text())
        line = int((level2 / "coherency_line_size").read_text())
    except (OSError, ValueError, StopIteration):
        return None
    sets = size // (ways * line)
    return (size, ways, line) if sets > 0 and sets & (sets - 1) == 0 else None


def counted_per_call(
    modes: tuple[str, ...], calls: int, endpoint: str, source: str | None, simulate: bool = False, times: int = 5
) -> dict[str, dict[str, float]]:
    """Each mode's events per tools/call as valgrind counts them (`COUNTED`, or `SIMULATED` if `simulate`):
    counts, not times, so free of the machine's noise. Two processes per mode, one block of `calls` and one of
    `times` × `calls`: start-up and warm-up cancel in their difference."""
    events = SIMULATED if simulate else COUNTED
    simulation: tuple[str, ...] = ("--cache-sim=no",)
    if simulate:
        core = core_cache()
        last_level = () if core is None else (f"--LL={core[0]},{core[1]},{core[2]}",)
        simulation = ("--cache-sim=yes", "--branch-sim=yes", *last_level)
    valgrind = ("valgrind", "--tool=cachegrind", *simulation, "--cachegrind-out-file=/dev/null")

    def count(job: tuple[str, int]) -> dict[str, int]:
        _, stderr = run_child("count", job[1], 0, endpoint, job[0], source, valgrind, VALGRIND_ENVIRONMENT)
        counts = {}
        for event, pattern in events.items():
            found = re.search(rf"{pattern}:\s+([\d,]+)", stderr)
            if found is None:
                raise SystemExit(f"valgrind printed no count of {event}: {stderr[-2000:]}")
            counts[event] = int(found.group(1).replace(",", ""))
        return counts

    jobs = [(mode, n) for mode in modes for n in (calls, times * calls)]
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        counted = dict(zip(jobs, pool.map(count, jobs)))
    return {mode: {event: (counted[mode, times * calls][event] - counted[mode, calls][event]) / ((times - 1) * calls)
                   for event in events} for mode in modes}


def instructions_per_call(calls: int, endpoint: str, source: str | None) -> dict[str, float]:
    """Each mode's instructions per tools/call (see `counted_per_call`), blind to the CPU's caches."""
    counted = counted_per_call((*INSTRUCTION_MODES, *PEER_OF), calls, endpoint, source)
    return {mode: events["instructions"] for mode, events in counted.items()}


def ratio_interval(rounds: list[list[tuple[float, float]]], resamples: int = 2000) -> tuple[float, float]:
    """The 95% interval of median(a) / median(b) over pairs (a, b) of a pass's blocks, grouped by round: a
    bootstrap at both levels (seeded), the rounds resampled and then each chosen round's pairs. A round is a
    process, and processes differ: on mcp 1.x the same mode's added cost moves by up to 2× from one process to
    the next (with the hash seed fixed too), more than between its blocks, so the interval counts both."""
    chance = random.Random(0)

    def resample() -> float:
        pairs = [pair for chosen in (chance.choice(rounds) for _ in rounds) for pair in
                 (chance.choice(chosen) for _ in chosen)]
        return statistics.median(a for a, _ in pairs) / statistics.median(b for _, b in pairs)

    ratios = sorted(resample() for _ in range(resamples))
    return ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1]


def goal_pairs(rounds: list[dict[str, list[float]]]) -> list[list[tuple[float, float]]]:
    """Per round, (plugin adds, propagated floor adds) for each pass: each paired with the pass's `none`."""
    return [[(plugin - none, floor - none) for plugin, floor, none in
             zip(measured["plugin"], measured[PROPAGATED], measured["none"])] for measured in rounds]


def round_ratios(pairs: list[list[tuple[float, float]]]) -> str:
    """Each round's own goal ratio, in the order run: how far one process's figure strays."""
    return ", ".join(f"{statistics.median(a for a, _ in each) / statistics.median(b for _, b in each):.2f}"
                     for each in pairs)


def pooled(rounds: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Every round's values of each mode, one list per mode."""
    measured: dict[str, list[float]] = {}
    for each in rounds:
        for mode, values in each.items():
            measured.setdefault(mode, []).extend(values)
    return measured


def goal_summary(rounds: list[dict[str, list[float]]]) -> dict[str, Any]:
    """The goal's figures over every round: `none`'s median and the plugin's and the propagated floor's added
    medians in µs per call, their ratio, its interval and each round's own ratio."""
    pairs = goal_pairs(rounds)
    plugin = statistics.median(a for each in pairs for a, _ in each)
    floor = statistics.median(b for each in pairs for _, b in each)
    return {
        "none": 1e6 * statistics.median(none for each in rounds for none in each["none"]),
        "plugin adds": 1e6 * plugin,
        PROPAGATED: 1e6 * floor,
        "adds / propagated": plugin / floor,
        "interval": ratio_interval(pairs),
        "per round": round_ratios(pairs),
    }


def summary(rounds: list[dict[str, list[float]]]) -> dict[str, Any]:
    """Medians in µs per call over every round's blocks; the added costs paired block by block (the same
    moment's noise cancels)."""
    measured = pooled(rounds)

    def median(values: list[float]) -> float:
        return 1e6 * statistics.median(values)

    none = measured["none"]

    def adds(mode: str) -> list[float]:
        return [m - n for m, n in zip(measured[mode], none)]

    plugin_adds, in_situ_adds, in_place_adds = adds("plugin"), adds("in situ"), adds("in place")
    return {
        **goal_summary(rounds),
        "no-op": median(adds("no-op")),
        "in situ": median(in_situ_adds),
        "in place": median(in_place_adds),
        "loop": median(measured["loop"]),
        # Ratios of the medians: a block's own ratio divides by a small, noisy difference.
        "adds / in situ": statistics.median(plugin_adds) / statistics.median(in_situ_adds),
        "adds / in place": statistics.median(plugin_adds) / statistics.median(in_place_adds),
        "adds / loop": statistics.median(plugin_adds) / statistics.median(measured["loop"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300, help="tools/calls per block")
    parser.add_argument("--blocks", type=int, default=12, help="blocks of each mode per round")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per plugin measured")
    parser.add_argument("--profile", choices=(*MODES, *PEER_OF),
                        help="profile one block of this mode instead of measuring")
    parser.add_argument("--opcodes", action="store_true",
                        help="instead: the Python bytecodes per call of none, the plugin and the propagated floor, "
                             "by package")
    parser.add_argument("--goal", action="store_true",
                        help="only none, the plugin and the propagated floor: the goal's ratio, over many rounds")
    parser.add_argument("--smoke", action="store_true", help="a few calls each, to check that it works")
    parser.add_argument("--before", help="src/ of another checkout: its plugin is measured too, interleaved")
    parser.add_argument("--memory", type=int, metavar="CALLS",
                        help="instead: resident memory after every tenth of CALLS calls with the plugin on")
    parser.add_argument("--in-flight", metavar="LEVELS",
                        help="instead: the plugin's added CPU per call with these many calls in flight (1,100,1000)")
    parser.add_argument("--user-hooks", action="store_true",
                        help="the plugin with a request_hook and a response_hook (that do nothing)")
    parser.add_argument("--instructions", action="store_true",
                        help="instead: instructions per call, counted by valgrind (blocks of --calls and 5x that)")
    parser.add_argument("--caches", action="store_true",
                        help="with --instructions: instead, what valgrind's cache and branch simulation make of "
                             "the plugin's and the propagated floor's instructions")
    options = parser.parse_args()
    if options.user_hooks:
        os.environ[USER_HOOKS] = "1"  # the children inherit it
    calls, blocks, rounds = (20, 1, 1) if options.smoke else (options.calls, options.blocks, options.rounds)
    per_block = 2 if options.smoke else options.calls  # a counted or traced block: slow, so smaller in smoke mode
    sink = OtlpSink(keep=False).start()
    sources = {"this checkout": None, **({options.before: options.before} if options.before else {})}
    measured: dict[str, list[dict[str, list[float]]]] = {name: [] for name in sources}  # each round's
    try:
        if options.profile:
            print(run_child("profile", calls, blocks, sink.endpoint, mode=options.profile)[1])
            return
        if options.opcodes:
            print_opcodes(per_block, sink.endpoint)
            return
        if options.instructions and options.caches:
            print_simulated(counted_per_call(GOAL_MODES, per_block, sink.endpoint, None, simulate=True))
            return
        if options.instructions and options.in_flight:
            print_counted_in_flight(options.in_flight, per_block, sink.endpoint)
            return
        if options.instructions:
            print_instructions({name: instructions_per_call(per_block, sink.endpoint, source)
                                for name, source in sources.items()})
            return
        if options.in_flight:
            print_in_flight(options.in_flight, calls, blocks, rounds, sink.endpoint)
            return
        if options.memory:
            report, _ = run_child("memory", options.memory, 0, sink.endpoint)
            print(f"mcp {importlib.metadata.version('mcp')}, the plugin on both ends, one session, memory streams")
            print("| calls | resident MiB | requests the plugin still holds |\n|---|---|---|")
            for done, mib, held in zip(report["calls"], report["rss_mib"], report["held"]):
                print(f"| {done:,} | {mib:.1f} | {held:.0f} |")
            return
        job = "goal" if options.goal else "measure"
        for _ in range(rounds):
            for name, source in sources.items():
                measured[name].append(run_child(job, calls, blocks, sink.endpoint, source=source)[0])
    finally:
        sink.stop()
    if options.goal:
        print_goal(measured, rounds, blocks, calls)
        return
    version = importlib.metadata.version("mcp")
    print(f"{title()}: {rounds} rounds x {blocks} blocks x {calls} tools/calls per mode, in one process over "
          "memory streams, CPU time per call (medians)")
    print("| mcp | plugin | no telemetry µs | plugin adds µs | with no-op providers µs | floor in situ µs "
          "| adds / in situ | floor in place µs | adds / in place | floor in place, propagated µs "
          "| adds / in place, propagated (95% interval) | floor in a loop µs | adds / loop |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = {name: summary(measured[name]) for name in sources}
    for name, row in rows.items():
        print(f"| {version} | {name} | {row['none']:.0f} | {row['plugin adds']:.0f} | {row['no-op']:.0f} | "
              f"{row['in situ']:.0f} | {row['adds / in situ']:.2f} | {row['in place']:.0f} | "
              f"{row['adds / in place']:.2f} | {row[PROPAGATED]:.0f} | {row['adds / propagated']:.2f} "
              f"({row['interval'][0]:.2f}–{row['interval'][1]:.2f}) | "
              f"{row['loop']:.0f} | {row['adds / loop']:.2f} |")
    for name, row in rows.items():
        print(f"adds / in place, propagated, each round ({name}): {row['per round']}")
    print_peers(pooled(measured["this checkout"]), "µs", "{:.0f}")


def print_goal(measured: dict[str, list[dict[str, list[float]]]], rounds: int, blocks: int, calls: int) -> None:
    """The goal's ratio alone: the plugin against the propagated floor, over many rounds (fresh processes)."""
    version = importlib.metadata.version("mcp")
    print(f"{title()}: {rounds} rounds x {blocks} blocks x {calls} tools/calls of {', '.join(GOAL_MODES)}, in one "
          "process over memory streams, CPU time per call (medians)")
    print("| mcp | plugin | no telemetry µs | plugin adds µs | floor in place, propagated µs "
          "| adds / in place, propagated (95% interval) | each round |\n|---|---|---|---|---|---|---|")
    for name, each in measured.items():
        row = goal_summary(each)
        print(f"| {version} | {name} | {row['none']:.0f} | {row['plugin adds']:.0f} | {row[PROPAGATED]:.0f} | "
              f"{row['adds / propagated']:.2f} ({row['interval'][0]:.2f}–{row['interval'][1]:.2f}) | "
              f"{row['per round']} |")


PLUGIN_RECORDS = ("a CLIENT and a SERVER span per tools/call with `tool.outcome`, a record in each duration "
                  "histogram; trace context in `_meta`; the outcome of a cancel, ghosts")
SPANS_ONLY_RECORDS = "the same spans, trace context, outcomes and ghosts; no metrics (a no-op meter provider)"
FLOOR_RECORDS = "the plugin's spans and histogram records for an ok call, and the trace context; nothing else"


def print_peers(measured: dict[str, list[float]], unit: str, number: str) -> None:
    """The other instrumentations beside the plugin and the floor: what each adds per call to `none` (each
    mode's values: per block, paired with `none`'s; or one count each), and the spans it made per call."""
    def adds(mode: str) -> float:
        return statistics.median(m - n for m, n in zip(measured[mode], measured["none"]))

    def spans(mode: str) -> str:
        per_block = measured.get(f"{SPANS}@{mode}")
        return "" if per_block is None else f"{statistics.median(per_block):.1f}"

    scale = 1e6 if unit == "µs" else 1e-6
    plugin, floor = adds("plugin"), adds(PROPAGATED)
    print(f"\nThe other instrumentations of MCP on mcp {importlib.metadata.version('mcp')}, the same calls, "
          "the same providers:")
    print(f"| instrumentation | adds {unit} per call | adds / plugin adds | adds / floor in place, propagated "
          "| spans per call | what it records |\n|---|---|---|---|---|---|")
    rows = [("otel-mcp-cancel", "plugin", PLUGIN_RECORDS),
            ("otel-mcp-cancel, spans only", SPANS_ONLY, SPANS_ONLY_RECORDS),
            ("floor in place, propagated", PROPAGATED, FLOOR_RECORDS)]
    rows += [(name, name, peer.records) for name, peer in PEER_OF.items()]
    for name, mode, records in rows:
        added = adds(mode)
        print(f"| {name} | {number.format(scale * added)} | {added / plugin:.2f} | {added / floor:.2f} "
              f"| {spans(mode)} | {records} |")
    for peer in PEERS:
        if peer.name not in PEER_OF:
            print(f"not run: {peer.name} ({peer.unavailable(MCP_MAJOR)})")


def print_opcodes(calls: int, endpoint: str) -> None:
    """Each goal mode's Python bytecodes per call by package, and what the plugin and the floor add to `none`'s."""
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        runs = pool.map(lambda mode: run_child("opcodes", calls, 0, endpoint, mode)[0], GOAL_MODES)
        counted = {mode: {package: values[0] for package, values in run.items()} for mode, run in zip(GOAL_MODES, runs)}
    print(f"{title()}: Python bytecodes per tools/call in the main thread, by the package whose code runs them "
          "(a trace function counts them; what C does for them is not counted)")
    print("| package | no telemetry | plugin | floor in place, propagated | plugin adds | floor adds |\n"
          "|---|---|---|---|---|---|")
    none, plugin, floor = (counted[mode] for mode in GOAL_MODES)
    packages = sorted(none.keys() | plugin.keys() | floor.keys(), key=lambda name: -plugin.get(name, 0.0))
    for package in [*packages, "all"]:
        values = [sum(run.values()) if package == "all" else run.get(package, 0.0) for run in (none, plugin, floor)]
        print(f"| {package} | {values[0]:,.0f} | {values[1]:,.0f} | {values[2]:,.0f} | {values[1] - values[0]:+,.0f} | "
              f"{values[2] - values[0]:+,.0f} |")


def print_in_flight(levels: str, calls: int, blocks: int, rounds: int, endpoint: str) -> None:
    measured: dict[str, list[float]] = {}
    for _ in range(rounds):
        for key, values in run_child("in-flight", calls, blocks, endpoint, mode=levels)[0].items():
            measured.setdefault(key, []).extend(values)
    print(f"{title()}: {rounds} rounds x {blocks} blocks x {calls} tools/calls, CPU time per call (medians)")
    print_levels({level: (1e6 * statistics.median(measured[f"none@{level}"]),
                          1e6 * statistics.median(p - n for p, n in zip(measured[f"plugin@{level}"],
                                                                        measured[f"none@{level}"])))
                  for level in levels.split(",")}, "µs", "{:.0f}")


def print_counted_in_flight(levels: str, calls: int, endpoint: str) -> None:
    """Instructions per call of `none` and `plugin` with each number of calls in flight: blocks of `calls` and
    2 × `calls` (5 × takes most of an hour under valgrind at 1,000 calls a block)."""
    modes = tuple(f"{mode}@{level}" for level in levels.split(",") for mode in ("none", "plugin"))
    counted = counted_per_call(modes, calls, endpoint, None, times=2)
    print(f"{title()}: blocks of {calls} and {2 * calls} tools/calls, instructions per call counted by valgrind")
    print_levels({level: (counted[f"none@{level}"]["instructions"] / 1e6,
                          (counted[f"plugin@{level}"]["instructions"] - counted[f"none@{level}"]["instructions"]) / 1e6)
                  for level in levels.split(",")}, "M", "{:.3f}")


def print_levels(per_level: dict[str, tuple[float, float]], unit: str, number: str) -> None:
    """Per number of calls in flight: (no telemetry, plugin adds), and adds against adds with the first level."""
    print(f"| mcp | in flight | no telemetry {unit} | plugin adds {unit} | adds / adds with "
          f"{next(iter(per_level))} in flight |")
    print("|---|---|---|---|---|")
    first = next(iter(per_level.values()))[1]
    for level, (none, adds) in per_level.items():
        print(f"| {importlib.metadata.version('mcp')} | {level} | {number.format(none)} | {number.format(adds)} | "
              f"{adds / first:.2f} |")


def print_instructions(counted: dict[str, dict[str, float]]) -> None:
    version = importlib.metadata.version("mcp")
    print(f"{title()}: instructions per tools/call, counted by valgrind, in one process over memory streams")
    print("| mcp | plugin | no telemetry M | plugin adds M | of which trace propagation M | floor in situ M "
          "| adds / in situ | floor in place M | adds / in place | floor in place, propagated M "
          "| adds / in place, propagated |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, per_call in counted.items():
        none, plugin, in_situ, in_place, propagated, unpropagated, _ = (
            per_call[mode] / 1e6 for mode in INSTRUCTION_MODES)
        adds = plugin - none
        print(f"| {version} | {name} | {none:.3f} | {adds:.3f} | {plugin - unpropagated:.3f} | {in_situ - none:.3f} | "
              f"{adds / (in_situ - none):.2f} | {in_place - none:.3f} | {adds / (in_place - none):.2f} | "
              f"{propagated - none:.3f} | {adds / (propagated - none):.2f} |")
    print_peers({mode: [count] for mode, count in counted["this checkout"].items()}, "M", "{:.3f}")


def print_simulated(counted: dict[str, dict[str, float]]) -> None:
    """What the plugin and the propagated floor add to each simulated event per call, and their ratio."""
    core = core_cache()
    last_level = "this CPU's last-level cache" if core is None else f"this core's L2 ({core[0] // 1024} KiB)"
    print(f"{title()}: per tools/call, as valgrind's cache and branch simulation counts them, in one process over "
          f"memory streams; LL: {last_level}")
    print("| mcp | event | no telemetry | plugin adds | floor in place, propagated adds | adds / floor adds |")
    print("|---|---|---|---|---|---|")
    version, none = importlib.metadata.version("mcp"), counted["none"]
    for event in SIMULATED:
        adds, floor_adds = counted["plugin"][event] - none[event], counted[PROPAGATED][event] - none[event]
        print(f"| {version} | {event} | {none[event]:,.0f} | {adds:,.0f} | {floor_adds:,.0f} | "
              f"{adds / floor_adds:.2f} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        job, endpoint, mode = sys.argv[2], sys.argv[5], sys.argv[6] or None
        calls, blocks = int(sys.argv[3]), int(sys.argv[4])
        if job == "memory":
            measured = memory_child(calls, endpoint)
        elif job == "count":
            measured = count_child(calls, endpoint, mode)
        elif job == "in-flight":
            measured = in_flight_child(calls, blocks, endpoint, mode)
        elif job == "goal":
            measured = child(calls, blocks, endpoint, None, GOAL_MODES)
        elif job == "opcodes":
            measured = opcodes_child(calls, endpoint, mode)
        else:
            measured = child(calls, blocks, endpoint, mode)
        print(json.dumps(measured))
    else:
        main()
