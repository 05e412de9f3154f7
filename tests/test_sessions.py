"""Sessions on either line: `mcp.server.session.duration` once per session however it ends, and on HTTP
the session id, client address and HTTP version on every request span."""

from __future__ import annotations

import json
import os
import re
import subprocess
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.memory import create_client_server_memory_streams
from mcp.types import LATEST_PROTOCOL_VERSION
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.trace import SpanKind

from examples.otlp_sink import OtlpSink, exporter_environment
from otel_mcp_cancel.instruments import SESSION_DURATION_BUCKETS
from otel_mcp_cancel.request_state import LIVE
from otel_mcp_cancel.session_telemetry import LIVE_SESSIONS, error_type
from tests.conftest import instrumentation, is_request_span
from tests.frameworks import LOWLEVEL, SDK
from tests.raw_peer import is_result, lowlevel_of, raw_peer_over, raw_session, served_in_memory
from tests.sdk_client import sdk_client
from tests.semconv import CONVENTION, TELEMETRY_DOC
from tests.servers import Gates, notes_server, raising_lowlevel_server
from tests.subprocess_servers import HttpServer, http_streams, instrumented_command, send_line
from tests.support import MCP_MAJOR, is_ghost_line, until

pytestmark = pytest.mark.anyio

SESSION_DURATION = "mcp.server.session.duration"
CLIENT_SESSION = "mcp.client.session.duration"
# What the tests' SDK client and its servers agree on: the newest the initialize handshake offers (2.x's
# client runs that handshake in the tests' legacy mode).
NEGOTIATED = "2025-11-25" if MCP_MAJOR == 2 else LATEST_PROTOCOL_VERSION


async def test_every_session_is_measured_once_when_it_ends(framework, captured) -> None:
    for _ in range(3):
        async with raw_session(notes_server(Gates(), framework)) as peer:
            assert is_result(await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    await until(lambda: len(LIVE_SESSIONS) == 0)
    (point,) = captured.points(SESSION_DURATION)
    # Memory streams: no transport; the client's name, as it named itself in initialize (bounded).
    assert dict(point.attributes) == {"mcp.protocol.version": peer.protocol_version, "mcp.client.name": "raw"}
    assert point.count == 3
    assert list(point.explicit_bounds) == list(SESSION_DURATION_BUCKETS)


async def test_a_session_that_never_initializes_is_measured_without_a_version(captured) -> None:
    async with served_in_memory(notes_server(Gates())) as (read_stream, write_stream):
        await write_stream.aclose()  # the client leaves before saying anything
        await until(lambda: len(captured.points(SESSION_DURATION)) == 1)
    (point,) = captured.points(SESSION_DURATION)
    assert (dict(point.attributes), point.count) == ({}, 1)
    assert len(LIVE_SESSIONS) == 0


async def test_a_transport_closed_under_a_request_ends_its_session_once(framework, captured) -> None:
    """The client goes away with a call in flight; the handler then returns. mcp 2.x and recent 1.x end the
    session normally; older 1.x releases die writing that late answer (ClosedResourceError): the session's
    error.type is whatever ended the server's run(), and nothing else."""
    gates = Gates()
    crashes: list[Exception] = []
    async with served_in_memory(notes_server(gates, framework), crashes) as (read_stream, write_stream):
        async with raw_peer_over(read_stream, write_stream) as peer:
            await peer.request(1, "tools/call", {"name": "slow", "arguments": {"text": "hi"}})
            await gates.started.wait()
            await write_stream.aclose()
            gates.let_go()  # mcp 1.x keeps serving the session until its handlers return
            await until(lambda: len(captured.points(SESSION_DURATION)) == 1)
    (point,) = captured.points(SESSION_DURATION)
    ended_by = {"error.type": error_type(crashes[0])} if crashes else {}
    assert dict(point.attributes) == {"mcp.protocol.version": peer.protocol_version, "mcp.client.name": "raw",
                                      **ended_by}
    assert point.count == 1 and len(LIVE_SESSIONS) == 0


async def test_a_session_an_error_ends_has_its_error_type(captured) -> None:
    """A server run with raise_exceptions: its handler's exception ends the session."""
    server = lowlevel_of(raising_lowlevel_server())
    ended: list[BaseException] = []
    async with create_client_server_memory_streams() as ((client_read, client_write), (server_read, server_write)):
        async with anyio.create_task_group() as tg:

            async def serve() -> None:
                try:
                    await server.run(server_read, server_write, server.create_initialization_options(), True)
                except Exception as error:  # what the test is about
                    ended.append(error)
                    await client_read.aclose()

            tg.start_soon(serve)
            async with raw_peer_over(client_read, client_write) as peer:
                await peer.request(1, "tools/call", {"name": "anything", "arguments": {}})
                await until(lambda: ended != [])
    (point,) = captured.points(SESSION_DURATION)
    assert (point.attributes["error.type"], point.count) == ("RuntimeError", 1)
    assert point.attributes["mcp.protocol.version"] == peer.protocol_version
    assert len(LIVE_SESSIONS) == 0


async def test_over_stdio_the_session_is_a_pipe(sink: OtlpSink, tmp_path: Path) -> None:
    command, *args = instrumented_command(tmp_path)
    parameters = StdioServerParameters(command=command, args=args, env=exporter_environment(sink.endpoint))
    async with stdio_client(parameters) as streams, raw_peer_over(*streams) as peer:
        assert is_result(await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    await until(lambda: sink.latest_points(SESSION_DURATION) != [], seconds=30)  # flushed as the server exits
    (point,) = sink.latest_points(SESSION_DURATION)
    # The convention's session attributes: no network.transport (stdio has no network.protocol.name).
    assert point.attributes == {"mcp.protocol.version": peer.protocol_version, "mcp.client.name": "raw"}
    assert point.value == 1


@pytest.mark.parametrize("gated_framework", [
    "", pytest.param("fastmcp", marks=pytest.mark.skipif(find_spec("fastmcp") is None, reason="no FastMCP here"))])
async def test_over_stdio_an_answer_whose_write_failed_reached_nobody(
    gated_framework: str, sink: OtlpSink, tmp_path: Path
) -> None:
    """The caller closes its end of the server's stdout and keeps stdin open. The next answer's write fails
    (BrokenPipeError; the SDK's transport then ends, and the server with it once its stdin is closed too). Its
    handler had finished and its caller never got the answer: cancelled, a ghost. The call still in flight lost
    its caller: cancelled."""
    environment = {**os.environ, **exporter_environment(sink.endpoint), "OTEL_LOGS_EXPORTER": "otlp_proto_http",
                   "OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED": "true", "GATED_FRAMEWORK": gated_framework}
    process = subprocess.Popen(instrumented_command(tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, env=environment, text=True)
    try:
        send_line(process, {"id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "closer", "version": "0"}}})
        assert json.loads(process.stdout.readline())["id"] == 1
        send_line(process, {"method": "notifications/initialized"})
        send_line(process, {"id": 2, "method": "tools/call", "params": {"name": "slow", "arguments": {"text": "a"}}})
        send_line(process, {"id": 3, "method": "tools/call", "params": {"name": "wait_started", "arguments": {}}})
        assert json.loads(process.stdout.readline())["id"] == 3  # `slow` is in flight
        process.stdout.close()
        send_line(process, {"id": 4, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "b"}}})

        def calls() -> dict[str, Any]:
            return {span.attributes["jsonrpc.request.id"]: span for span in sink.server_spans("otel_mcp_cancel")
                    if span.attributes["mcp.method.name"] == "tools/call"}

        # Both end as the write fails, before the caller's stdin closes (the SDK's reader waits for it).
        await until(lambda: len(calls()) == 3, seconds=30)
        process.stdin.close()
        # It ends in error: the transport's BrokenPipeError (1), or on 1.x Python's own flush of stdout at exit (120).
        assert process.wait(timeout=60) in (1, 120)
    finally:
        process.kill()
    spans = calls()
    assert {request_id: (span.attributes["tool.outcome"], span.attributes.get("tool.handler_outcome"),
                         [name for name, _ in span.events]) for request_id, span in spans.items()} == {
        "2": ("cancelled", None, ["tool.request_cancelled"]),
        "3": ("ok", None, []),
        "4": ("cancelled", "ok", ["tool.request_cancelled", "tool.ghost_response"]),
    }
    assert all("error.type" not in span.attributes for span in spans.values())
    outcomes = {(point.attributes["gen_ai.tool.name"], point.attributes["tool.outcome"]): point.value
                for point in sink.latest_points("mcp.server.operation.duration")
                if point.attributes["mcp.method.name"] == "tools/call"}
    assert outcomes == {("slow", "cancelled"): 1, ("wait_started", "ok"): 1, ("echo", "cancelled"): 1}
    (ghosts,) = sink.latest_points("tool.ghost_responses")
    assert (ghosts.attributes["gen_ai.tool.name"], ghosts.attributes["tool.ghost_risk"], ghosts.value) == (
        "echo", "unknown", 1)
    (warning,) = [log for log in sink.logs if is_ghost_line(str(log.body))]
    assert "tool 'echo' (request id 4," in str(warning.body) and "its caller was gone" in str(warning.body)
    assert warning.span_id == spans["4"].span_id


def assert_http_sessions(sink: OtlpSink, peer: Any, sessions: int) -> None:
    """The server's one session-duration series over HTTP/1.1, counting `sessions` sessions."""
    (point,) = sink.latest_points(SESSION_DURATION)
    assert point.attributes == {"mcp.protocol.version": peer.protocol_version, "network.protocol.name": "http",
                                "mcp.client.name": "raw"}
    assert point.value == sessions


async def test_over_streamable_http_every_request_names_its_session_and_its_peer(sink: OtlpSink, tmp_path) -> None:
    server = HttpServer(sink.endpoint, tmp_path, "streamable-http")
    try:
        for _ in range(2):
            async with http_streams(f"http://127.0.0.1:{server.port}/mcp") as streams:
                async with raw_peer_over(*streams) as peer:
                    for request_id in (1, 2):
                        await peer.call(request_id, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
                    await peer.cancel(2, "too late")  # for a request already answered: in no request's span
                    await peer.barrier("after")
        await until(lambda: len([s for s in sink.server_spans() if is_request_span(s)]) == 8)
        await until(lambda: len([s for s in sink.server_spans() if s.name == "notifications/cancelled"]) == 2)
    finally:
        server.stop()
    requests = [s for s in sink.server_spans() if is_request_span(s)]
    calls = [s for s in requests if s.attributes["mcp.method.name"] == "tools/call"]
    for span in requests:
        assert span.attributes["network.protocol.name"] == "http"
        assert span.attributes["network.protocol.version"] == "1.1"
        assert span.attributes["client.address"] == "127.0.0.1"
        assert isinstance(span.attributes["client.port"], int)
        # The client as it named itself in its session's initialize, on every request of the session.
        assert (span.attributes["mcp.client.name"], span.attributes["mcp.client.version"]) == ("raw", "0")
    # The session id comes with every request after initialize (the server assigns it in its answer).
    initializes = [s for s in requests if s.attributes["mcp.method.name"] == "initialize"]
    assert len(initializes) == 2 and all("mcp.session.id" not in s.attributes for s in initializes)
    # The version initialize answered with, on its own span and point too.
    assert [s.attributes.get("mcp.protocol.version") for s in initializes] == [peer.protocol_version] * 2
    (initialized,) = [p for p in sink.latest_points("mcp.server.operation.duration")
                      if p.attributes["mcp.method.name"] == "initialize"]
    assert (initialized.attributes.get("mcp.protocol.version"), initialized.value) == (peer.protocol_version, 2)
    sessions = {s.attributes["mcp.session.id"] for s in calls}
    assert len(sessions) == 2 and all(len(session) >= 16 for session in sessions)
    # A cancel is found beside the requests of its session, whether or not it names one still in flight.
    cancels = [s for s in sink.server_spans() if s.name == "notifications/cancelled"]
    assert {s.attributes["mcp.session.id"] for s in cancels} == sessions
    await until(lambda: sink.latest_points(SESSION_DURATION) != [], seconds=30)
    assert_http_sessions(sink, peer, 2)
    # HTTP's version is on the operation metric too (bounded: the server's own HTTP stack decides it).
    (echo,) = [p for p in sink.latest_points("mcp.server.operation.duration") if p.attributes.get("gen_ai.tool.name")]
    assert (echo.attributes["network.protocol.name"], echo.attributes["network.protocol.version"]) == ("http", "1.1")


async def test_over_sse_a_session_is_its_stream(sink: OtlpSink, tmp_path: Path) -> None:
    from mcp.client.sse import sse_client

    server = HttpServer(sink.endpoint, tmp_path, "sse")
    try:
        async with sse_client(f"http://127.0.0.1:{server.port}/sse") as streams:
            async with raw_peer_over(*streams) as peer:
                await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        await until(lambda: sink.latest_points(SESSION_DURATION) != [], seconds=30)
    finally:
        server.stop()
    (span,) = [s for s in sink.server_spans() if s.name == "tools/call echo"]
    assert {key: span.attributes[key] for key in ("network.transport", "network.protocol.name")} == {
        "network.transport": "tcp",
        "network.protocol.name": "http",
    }
    assert "mcp.session.id" not in span.attributes  # SSE names its session in a query parameter, not a header
    assert_http_sessions(sink, peer, 1)


async def test_the_client_measures_each_of_its_sessions(captured, sink: OtlpSink, tmp_path: Path) -> None:
    from mcp.client import stdio  # looked up now, instrumented: the helper says where its streams lead

    command, *args = instrumented_command(tmp_path)
    parameters = StdioServerParameters(command=command, args=args, env=exporter_environment(sink.endpoint))
    for _ in range(2):
        async with sdk_client(stdio.stdio_client(parameters)) as client:
            await client.call_tool("echo", {"text": "hi"})
    async with sdk_client(served_in_memory(notes_server(Gates()))) as client:
        await client.call_tool("echo", {"text": "hi"})
    assert len(LIVE_SESSIONS) == 0
    # Over stdio and memory streams alike: the negotiated version (read from initialize's answer on 1.x, which
    # keeps none), no network.transport (not a session attribute in the convention), no server address.
    # By the server's name, as it named itself in initialize's answer: the stdio server twice, the other once.
    counts = {point.attributes.get("mcp.server.name"): (point.count, dict(point.attributes))
              for point in captured.points(CLIENT_SESSION)}
    assert counts == {name: (count, {"mcp.protocol.version": NEGOTIATED, "mcp.server.name": name})
                      for name, count in (("gated-notes", 2), ("notes", 1))}


async def test_client_spans_name_the_session_the_server_gave(captured, sink: OtlpSink, tmp_path: Path) -> None:
    server = HttpServer(sink.endpoint, tmp_path, "streamable-http")
    try:
        async with sdk_client(http_streams(f"http://127.0.0.1:{server.port}/mcp")) as client:
            await client.call_tool("echo", {"text": "hi"})
        await until(lambda: any(s.name == "tools/call echo" for s in sink.server_spans()))
    finally:
        server.stop()
    (sent,) = [s for s in captured.of_kind(SpanKind.CLIENT) if s.name == "tools/call echo"]
    (served,) = [s for s in sink.server_spans() if s.name == "tools/call echo"]
    assert sent.attributes["mcp.session.id"] == served.attributes["mcp.session.id"]
    (initialize,) = [s for s in captured.of_kind(SpanKind.CLIENT) if s.name == "initialize"]
    assert "mcp.session.id" not in initialize.attributes  # the server assigns it in its answer
    # The version the handshake negotiated, from its own answer on: the same on both ends.
    for span in (initialize, sent):
        assert span.attributes["mcp.protocol.version"] == served.attributes["mcp.protocol.version"] == NEGOTIATED
    (sent_point,) = [p for p in captured.points("mcp.client.operation.duration")
                     if p.attributes.get("gen_ai.tool.name") == "echo"]
    assert sent_point.attributes["mcp.protocol.version"] == NEGOTIATED
    (session,) = captured.points(CLIENT_SESSION)
    assert dict(session.attributes) == {"mcp.protocol.version": NEGOTIATED, "network.protocol.name": "http",
                                        "server.address": "127.0.0.1", "server.port": server.port,
                                        "mcp.server.name": "gated-notes"}
    # The server as it named itself, on the client's spans from initialize's own on; its name on the metric.
    for span in (initialize, sent):
        assert span.attributes["mcp.server.name"] == "gated-notes"
    assert sent_point.attributes["mcp.server.name"] == "gated-notes"


async def test_a_caller_that_hung_up_gave_up_and_work_finished_after_is_a_ghost(
    framework, captured, plugin_log
) -> None:
    """The client closes its stream with two calls in flight, then both handlers are let go. The caller gave up
    (cancelled, as by a cancel with no reason). A shielded write finishes: a ghost, its answer delivered to
    nobody. The other handler is interrupted as the stream ends (mcp 2.x, later 1.x) or finishes (earlier
    1.x: a ghost too)."""
    gates = Gates()
    crashes: list[Exception] = []
    async with served_in_memory(notes_server(gates, framework), crashes) as (read_stream, write_stream):
        async with raw_peer_over(read_stream, write_stream) as peer:
            await peer.request(1, "tools/call", {"name": "shielded_write", "arguments": {"path": "a.md"}})
            await gates.started.wait()
            gates.started = anyio.Event()
            await peer.request(2, "tools/call", {"name": "slow", "arguments": {"text": "x"}})
            await gates.started.wait()
            await write_stream.aclose()
            try:  # the server reads the end of the stream (the plugin notes the write's caller gone) first
                await until(lambda: [record.caller_gone for record in list(LIVE._records.values())
                                     if record.request_id == 1] == [True])
            finally:
                gates.let_go()
            await until(lambda: len([s for s in captured.request_spans() if s.name.startswith("tools/call")]) == 2)
    spans = {s.attributes["jsonrpc.request.id"]: s for s in captured.request_spans() if s.name.startswith("tools/")}
    assert gates.side_effects == ["a.md"]
    slow_ghost = "ok" if gates.finished == ["x"] else None
    # mcp 1.x servers that cancel the requests they handle as their transport closes (those that interrupted the
    # slow handler; not standalone FastMCP's) cut the ghost's answer's write short.
    write_cut = [("tool.response_write_interrupted", {})] if (
        MCP_MAJOR == 1 and framework in (SDK, LOWLEVEL) and not gates.finished) else []
    for request_id, handler_outcome in (("1", "ok"), ("2", slow_ghost)):
        span = spans[request_id]
        assert span.attributes["tool.outcome"] == "cancelled", request_id
        assert span.attributes.get("tool.handler_outcome") == handler_outcome, request_id
        ghost = [("tool.ghost_response", {"tool.handler_outcome": handler_outcome, "tool.ghost_risk": "unknown",
                                          "tool.ghost_kind": "caller_gone"}),
                 *write_cut] if handler_outcome else []
        assert "error.type" not in span.attributes
        assert framework.our_events(span) == [("tool.request_cancelled", {}), *ghost], request_id
    ghosts = sum(p.value for p in captured.points("tool.ghost_responses"))
    assert ghosts == len([record for record in plugin_log() if is_ghost_line(record.getMessage())]) == (
        1 + len(gates.finished))



async def test_the_documented_view_gives_the_session_metrics_the_conventions_buckets() -> None:
    """docs/telemetry.md's View, run as written: a user who wants the convention's buckets gets them."""
    reader = InMemoryMetricReader()
    (code,) = re.findall(r"```python\n(.*?)```", TELEMETRY_DOC.split("\n## Deviations\n", 1)[1], re.S)
    namespace: dict[str, Any] = {"readers": [reader]}  # the user's readers, as the text says
    exec(code, namespace)  # noqa: S102 - the documentation's own example
    with instrumentation(meter_provider=namespace["provider"]):
        async with raw_session(notes_server(Gates())) as peer:
            await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        await until(lambda: "mcp.server.session.duration" in metric_bounds(reader))
    bounds = metric_bounds(reader)
    assert bounds["mcp.server.session.duration"] == CONVENTION["buckets"]
    assert bounds["mcp.server.operation.duration"] == CONVENTION["buckets"]  # as it always is


def metric_bounds(reader: InMemoryMetricReader) -> dict[str, list[float]]:
    data = reader.get_metrics_data()
    return {metric.name: list(metric.data.data_points[0].explicit_bounds)
            for resource in (data.resource_metrics if data else []) for scope in resource.scope_metrics
            for metric in scope.metrics if metric.data.data_points}


async def test_a_client_that_closes_its_session_under_a_call_gave_up(captured) -> None:
    """Its own code left the session while a call was in flight (an agent framework closing its connection):
    the client's span says cancelled by its caller, not failed with the closing connection's error."""
    gates = Gates()
    errors: list[BaseException] = []

    async def call(client: Any) -> None:
        try:
            await client.call_tool("slow", {"text": "x"})
        except BaseException as exc:  # whatever the closing session raises into the call
            errors.append(exc)
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise

    async with anyio.create_task_group() as tg:
        async with sdk_client(served_in_memory(notes_server(gates))) as client:
            tg.start_soon(call, client)
            await gates.started.wait()
        gates.let_go()
        if MCP_MAJOR == 1:  # 1.x leaves the call waiting forever once its session closed: its caller stops it
            tg.cancel_scope.cancel()
    (span,) = [s for s in captured.of_kind(SpanKind.CLIENT) if s.name == "tools/call slow"]
    assert (span.attributes["tool.outcome"], span.attributes["tool.cancel_reason"]) == ("cancelled", "caller")
    assert "error.type" not in span.attributes and span.status.status_code.name == "UNSET"
