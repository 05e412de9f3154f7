"""A stdio server stopped the way MCP hosts stop one (the SDK's client, the TypeScript SDK's): its stdin closed,
then SIGTERM 2 s later if it is still running. The call in flight when its caller left is concluded then, as
`cancelled`, and exported with the session's duration point before the signal kills the process: a sync tool in
a worker thread, blocking work an async tool hands to a thread, and an async tool, on the SDK's server and
standalone FastMCP, on each line. A
handler that ends after that is a ghost on a span of its own under the call's, counted, with its WARNING in that
span's trace. And the serving process keeps SIGTERM at its default and anyio's classes as they are.

Ordered by events, not time: the test waits for what the receiver got before it sends the signal the host would
send, and asserts the process was still running (killed, not exited) where its handler cannot be interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from examples.otlp_sink import OtlpSink, ReceivedSpan, exporter_environment
from tests.frameworks import FASTMCP_MAJOR
from tests.subprocess_servers import call_over_pipe, send_line, stdio_gated_server
from tests.support import GHOST_LINE_PREFIX, MCP_MAJOR, until

pytestmark = pytest.mark.anyio

SCOPE = "otel_mcp_cancel"
# The gated server's framework: the SDK's own (MCPServer on 2.x, FastMCP on 1.x), and standalone FastMCP here.
FRAMEWORKS = ["sdk", *(["fastmcp"] if FASTMCP_MAJOR is not None else [])]
# Where a `def` tool runs in a worker thread (elsewhere on the event loop, which it blocks).
SYNC_TOOLS_IN_THREAD = {"sdk": MCP_MAJOR == 2, "fastmcp": FASTMCP_MAJOR is not None and FASTMCP_MAJOR >= 3}
TOOLS = {
    "sync tool in a worker thread": "sync_write",
    "async tool handing blocking work to a thread": "threaded_write",
    "async tool": "slow",
}


def start_call_and_hang_up(process: subprocess.Popen, tool: str, arguments: dict, *,
                           cancel_first: bool = False) -> None:
    """Call `tool` (request 1), wait until its handler runs, then close the server's stdin as a host does; with
    `cancel_first`, cancel the call before, and wait until the server has read the cancel."""
    send_line(process, {"id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
    call_over_pipe(process, 2, "wait_started", {})
    if cancel_first:
        send_line(process, {"method": "notifications/cancelled", "params": {"requestId": 1, "reason": "enough"}})
        # Read in order: once request 3 is answered, the cancel was read (mcp 1.x acknowledges it with an error
        # line for request 1 first).
        send_line(process, {"id": 3, "method": "tools/call", "params": {"name": "wait_started", "arguments": {}}})
        while json.loads(process.stdout.readline()).get("id") != 3:
            pass
    process.stdin.close()


def the_call(sink: OtlpSink, tool: str) -> list[ReceivedSpan]:
    return [span for span in sink.server_spans(SCOPE) if span.name == f"tools/call {tool}"]


def tool_points(sink: OtlpSink, tool: str) -> dict[str, float]:
    return {point.attributes["tool.outcome"]: point.value for point in sink.latest_points(
        "mcp.server.operation.duration") if point.attributes.get("gen_ai.tool.name") == tool}


def assert_cancelled_as_its_caller_left(span: ReceivedSpan) -> None:
    assert span.attributes["tool.outcome"] == "cancelled"
    assert span.attributes["jsonrpc.request.id"] == "1"
    assert "tool.handler_outcome" not in span.attributes and "error.type" not in span.attributes
    assert span.status == "UNSET"
    assert [name for name, _ in span.events] == ["tool.request_cancelled"]


async def blocking_the_loop(tmp_path: Path, sink: OtlpSink, framework: str) -> subprocess.Popen:
    """A stdio server whose call (request 1) blocks its event loop until the test opens tmp_path/gate."""
    os.mkfifo(tmp_path / "gate")
    process = stdio_gated_server(tmp_path, sink.endpoint, framework)
    try:
        send_line(process, {"id": 1, "method": "tools/call",
                            "params": {"name": "blocking_insert", "arguments": {"row": "r"}}})
        await until(lambda: (tmp_path / "blocking").exists())
    except BaseException:
        process.kill()
        raise
    return process


def kill_as_the_host_does(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)


async def stopped_once_its_ghost_is_out(sink: OtlpSink, process: subprocess.Popen) -> None:
    """Wait for a ghost's span, point and WARNING, then stop the server as its host does, if it is still up."""
    await until(lambda: any(span.name == "tool.ghost_response" for span in sink.spans)
                and sink.latest_points("tool.ghost_responses") != []
                and any(log.body.startswith(GHOST_LINE_PREFIX) for log in sink.logs))
    if process.poll() is None:
        kill_as_the_host_does(process)


def the_call_and_its_ghost(sink: OtlpSink, tool: str) -> tuple[ReceivedSpan, ReceivedSpan]:
    """The call's span, cancelled as its caller left, and the one ghost span under it."""
    (span,) = the_call(sink, tool)
    assert_cancelled_as_its_caller_left(span)
    (ghost,) = [span for span in sink.spans if span.name == "tool.ghost_response"]
    return span, ghost


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", TOOLS)
async def test_the_call_in_flight_when_the_host_stops_the_server_is_exported_as_cancelled(
    sink: OtlpSink, tmp_path: Path, framework: str, case: str
) -> None:
    tool = TOOLS[case]
    if tool == "sync_write" and not SYNC_TOOLS_IN_THREAD[framework]:
        pytest.skip(f"{framework} runs `def` tools on the event loop here: no stdin is read until they return")
    process = stdio_gated_server(tmp_path, sink.endpoint, framework)
    try:
        start_call_and_hang_up(process, tool, {"text": "x"} if tool == "slow" else {"name": "never.md"})
        await until(lambda: the_call(sink, tool) != [] and tool_points(sink, tool) != {}
                    and sink.latest_points("mcp.server.session.duration") != [])
        # A handler nothing interrupts keeps the process alive: only the host's SIGTERM ends it, after this.
        uninterruptible = tool != "slow" or MCP_MAJOR == 1  # 1.x lets its handlers run on when the caller leaves
        if uninterruptible:
            assert process.poll() is None
        kill_as_the_host_does(process)
    finally:
        process.kill()
    (span,) = the_call(sink, tool)
    assert_cancelled_as_its_caller_left(span)
    assert tool_points(sink, tool) == {"cancelled": 1}
    # The session ended as its caller hung up, normally (no error.type): measured then, once, before the kill.
    (session,) = sink.latest_points("mcp.server.session.duration")
    assert (session.attributes, session.value) == ({"mcp.protocol.version": "2025-06-18", "mcp.client.name": "host"}, 1)
    assert not (tmp_path / "never.md").exists()
    if uninterruptible:
        assert process.returncode == -signal.SIGTERM  # killed, as the host kills it: what was exported is all


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("cancel_first", [False, True], ids=["hung up", "cancelled, then hung up"])
async def test_a_handler_that_finishes_after_its_caller_left_is_a_ghost_under_the_call(
    sink: OtlpSink, tmp_path: Path, framework: str, cancel_first: bool
) -> None:
    """Its kind names what first kept the answer from its caller: it left (`caller_gone`), or it had cancelled
    before it left (`suppressed`: it was told `cancelled` first)."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    process = stdio_gated_server(tmp_path, sink.endpoint, framework)
    try:
        start_call_and_hang_up(process, "threaded_write", {"name": "g.md", "gate": str(gate)},
                               cancel_first=cancel_first)
        await until(lambda: the_call(sink, "threaded_write") != [])
        gate.write_text("go")  # the worker thread reads it, writes g.md and returns: the answer reaches nobody
        await stopped_once_its_ghost_is_out(sink, process)
    finally:
        process.kill()
    assert (tmp_path / "g.md").read_text() == "written"
    span, ghost = the_call_and_its_ghost(sink, "threaded_write")
    assert (ghost.scope, ghost.kind, ghost.trace_id, ghost.parent_span_id) == (
        SCOPE, "INTERNAL", span.trace_id, span.span_id)
    kind, why = ("suppressed", "the caller cancelled") if cancel_first else ("caller_gone", "caller was gone")
    facts = {"tool.handler_outcome": "ok", "tool.ghost_risk": "unknown", "tool.ghost_kind": kind}
    assert ghost.attributes == {"gen_ai.tool.name": "threaded_write", "jsonrpc.request.id": "1", **facts}
    assert ghost.events == [("tool.ghost_response", facts)]
    (counted,) = sink.latest_points("tool.ghost_responses")
    assert (counted.attributes, counted.value) == ({"mcp.method.name": "tools/call",
                                                   "gen_ai.tool.name": "threaded_write", **facts}, 1)
    (line,) = [log for log in sink.logs if log.body.startswith(GHOST_LINE_PREFIX)]
    assert (line.severity_text, line.trace_id, line.span_id) == ("WARN", span.trace_id, ghost.span_id)
    assert "tool 'threaded_write'" in line.body and "request id 1" in line.body and why in line.body
    # Still one call: its span, and its one duration point.
    assert tool_points(sink, "threaded_write") == {"cancelled": 1}


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_serving_stdio_server_keeps_sigterm_at_its_default_and_anyios_classes_unwrapped(
    sink: OtlpSink, tmp_path: Path, framework: str
) -> None:
    process = stdio_gated_server(tmp_path, sink.endpoint, framework)
    try:
        answer = call_over_pipe(process, 1, "process_state", {})
        process.stdin.close()
        process.wait(timeout=30)
    finally:
        process.kill()
    state = answer["result"].get("structuredContent", {}).get("result") or answer["result"]["content"][0]["text"]
    handlers = json.loads(state)
    assert handlers["anyio"] == ["function", "function"]
    if os.environ.get("GATED_SERVER_DDTRACE"):  # ddtrace, started in the server, handles SIGTERM itself
        assert handlers["sigterm"].startswith("<function handle_signal.<locals>"), handlers
    else:
        assert handlers["sigterm"] == str(signal.SIG_DFL)


def test_a_process_that_never_imports_mcp_keeps_sigterm_at_its_default(sink: OtlpSink) -> None:
    """Under `opentelemetry-instrument`, in an environment that has mcp and the plugin."""
    import sys

    done = subprocess.run(
        [str(Path(sys.executable).with_name("opentelemetry-instrument")), sys.executable, "-c",
         "import signal, sys; print(signal.getsignal(signal.SIGTERM), 'mcp' in sys.modules)"],
        env={**os.environ, **exporter_environment(sink.endpoint)}, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == [str(signal.SIG_DFL), "False"], done.stderr[-2000:]


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_cancel_sent_before_the_hang_up_names_the_ghost_though_a_blocked_loop_reads_it_after(
    sink: OtlpSink, tmp_path: Path, framework: str
) -> None:
    """The caller cancels and closes stdin at once, while a handler blocks the event loop: the hang-up watch
    concludes the call before the loop can read the cancel, which was sent first. The ghost, once the handler
    ends, names what the caller did: it cancelled (`suppressed`), as on a free loop."""
    process = await blocking_the_loop(tmp_path, sink, framework)
    try:
        send_line(process, {"method": "notifications/cancelled", "params": {"requestId": 1, "reason": "enough"}})
        process.stdin.close()
        await until(lambda: the_call(sink, "blocking_insert") != [])  # concluded by the watch, the loop blocked
        (tmp_path / "gate").write_text("go")  # the insert ends: its answer reaches nobody
        await stopped_once_its_ghost_is_out(sink, process)
    finally:
        process.kill()
    assert (tmp_path / "rows").read_text() == "r\n"
    _, ghost = the_call_and_its_ghost(sink, "blocking_insert")
    assert ghost.attributes["tool.ghost_kind"] == "suppressed"
    (counted,) = sink.latest_points("tool.ghost_responses")
    assert (counted.attributes["tool.ghost_kind"], counted.value) == ("suppressed", 1)


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_call_blocking_the_event_loop_when_the_host_stops_the_server_is_exported_as_cancelled(
    sink: OtlpSink, tmp_path: Path, framework: str
) -> None:
    """Synchronous work inside an `async` tool (sqlite, `subprocess.run`) blocks the event loop: the server never
    reads its stdin's end. The plugin watches the pipe itself while a stdio server serves: the call, its point and
    the session's are exported before the host's SIGTERM, the loop still blocked (its gate, a FIFO, never opened)."""
    process = await blocking_the_loop(tmp_path, sink, framework)
    try:
        process.stdin.close()
        await until(lambda: the_call(sink, "blocking_insert") != [] and tool_points(sink, "blocking_insert") != {}
                    and sink.latest_points("mcp.server.session.duration") != [])
        assert process.poll() is None  # still blocked: only the host's signal ends it
        kill_as_the_host_does(process)
    finally:
        process.kill()
    (span,) = the_call(sink, "blocking_insert")
    assert_cancelled_as_its_caller_left(span)
    assert tool_points(sink, "blocking_insert") == {"cancelled": 1}
    (session,) = sink.latest_points("mcp.server.session.duration")
    assert (session.attributes, session.value) == ({"mcp.protocol.version": "2025-06-18", "mcp.client.name": "host"}, 1)
    assert process.returncode == -signal.SIGTERM and not (tmp_path / "rows").exists()
