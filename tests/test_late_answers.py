"""The late answer a client throws away. A client whose timeout fired tells its caller "cancelled"; a server that
answers the call anyway did the work: mcp 1.x and 2.x servers that block their loop (they write the answer before
they read the cancel), and the Go SDK's server, which writes a cancelled call's answer (go-sdk #1259). The client's
SDK drops that answer. The instrumented client reports it: a `tool.ghost_response` span under the call's client
span (`tool.ghost_kind=late_answer`), counted in `tool.ghost_responses` by that kind, and the WARNING in that
span's context. Against the
gated Python server without the plugin and the Go SDK's server, each over stdio, with the SDK's client and
FastMCP's; ordered by a FIFO the tool waits on, no sleeps."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import asynccontextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from packaging.version import Version

from otel_mcp_cancel.answers import Answer
from otel_mcp_cancel.outcome import late_answer
from tests.frameworks import FASTMCP_MAJOR
from tests.sdk_client import sdk_client
from tests.subprocess_servers import GATED_SERVER, go_program
from tests.support import GHOST_LINE_PREFIX, until

pytestmark = pytest.mark.anyio

CLIENTS = ["sdk", *(["fastmcp"] if FASTMCP_MAJOR is not None else [])]
# Before mcp 1.23 a client drops an answer it no longer waits for inside its receive loop, where nothing is hooked.
SEES_LATE_ANSWERS = Version(version("mcp")) >= Version("1.23")
TIMEOUT = 0.5  # the tool waits for the test's FIFO: it cannot answer before this fires


def server_command(server: str, vault: Path) -> list[str]:
    """The gated Python server run plainly (no plugin, no OpenTelemetry), or the Go SDK's server."""
    if server == "python":
        return [sys.executable, str(GATED_SERVER), str(vault), "stdio"]
    return [str(go_program("./server")), str(vault)]


@asynccontextmanager
async def calling(client: str, command: list[str]) -> Any:
    """A call of `blocking_insert` with a timeout, through the SDK's client or FastMCP's."""
    if client == "sdk":
        from mcp.client.stdio import StdioServerParameters, stdio_client

        async with sdk_client(stdio_client(StdioServerParameters(command=command[0], args=command[1:]))) as session:
            yield lambda: session.call_tool("blocking_insert", {"row": "r"}, timeout=TIMEOUT)
    else:
        from fastmcp import Client
        from fastmcp.client.transports import StdioTransport

        async with Client(StdioTransport(command[0], command[1:])) as session:
            yield lambda: session.call_tool("blocking_insert", {"row": "r"}, timeout=TIMEOUT)


class SpanOfEachLine(logging.Handler):
    """The plugin's log lines, each with the span current as it was logged (an OTLP log record's trace context)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[tuple[str, trace.SpanContext]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.getMessage(), trace.get_current_span().get_span_context()))


@pytest.fixture
def plugin_lines() -> Iterator[SpanOfEachLine]:
    handler, logger = SpanOfEachLine(), logging.getLogger("otel_mcp_cancel")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


@pytest.mark.skipif(not SEES_LATE_ANSWERS, reason="mcp before 1.23 gives nothing to hook")
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("server", ["python", "go"])
async def test_an_answer_that_comes_after_the_client_gave_up_is_a_late_answer_ghost(
    captured, plugin_lines: SpanOfEachLine, tmp_path: Path, server: str, client: str
) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    async with calling(client, server_command(server, tmp_path)) as call:
        with pytest.raises(Exception) as timed_out:  # noqa: B017 - each client raises its own timeout error
            await call()
        assert "timed out" in str(timed_out.value).lower() or isinstance(timed_out.value, TimeoutError)
        assert (tmp_path / "blocking").exists() and not (tmp_path / "rows").exists()  # still waiting
        await anyio.to_thread.run_sync(gate.write_text, "go")  # the tool finishes and its server answers
        await until(lambda: any(span.name == "tool.ghost_response" for span in captured.spans.get_finished_spans()))
    assert (tmp_path / "rows").read_text() == "r\n"  # the work its caller was told was cancelled happened
    spans = captured.spans.get_finished_spans()
    (call_span,) = [span for span in spans
                    if span.kind is SpanKind.CLIENT and span.name == "tools/call blocking_insert"]
    assert (call_span.attributes["tool.outcome"], call_span.attributes["tool.cancel_reason"],
            call_span.attributes["error.type"]) == ("cancelled", "timeout", "timeout")
    request_id = call_span.attributes["jsonrpc.request.id"]
    (ghost,) = [span for span in spans if span.name == "tool.ghost_response"]
    assert ghost.kind is SpanKind.INTERNAL and ghost.parent.span_id == call_span.context.span_id
    assert ghost.context.trace_id == call_span.context.trace_id
    assert dict(ghost.attributes) == {"gen_ai.tool.name": "blocking_insert", "jsonrpc.request.id": request_id,
                                      "tool.ghost_kind": "late_answer", "tool.handler_outcome": "ok",
                                      "tool.cancel_reason": "timeout"}
    assert [(event.name, dict(event.attributes)) for event in ghost.events] == [
        ("tool.ghost_response", {"tool.handler_outcome": "ok", "tool.ghost_kind": "late_answer",
                                 "tool.cancel_reason": "timeout"})]
    # Counted with every other ghost, by its kind: the client's view apart from a server's.
    (point,) = captured.points("tool.ghost_responses")
    assert (dict(point.attributes), point.value) == ({"mcp.method.name": "tools/call",
                                                      "gen_ai.tool.name": "blocking_insert",
                                                      "tool.handler_outcome": "ok", "tool.ghost_kind": "late_answer",
                                                      "tool.cancel_reason": "timeout"}, 1)
    (line,) = [(text, context) for text, context in plugin_lines.lines if text.startswith(GHOST_LINE_PREFIX)]
    assert line[1].span_id == ghost.context.span_id and line[1].trace_id == ghost.context.trace_id
    assert f"tool 'blocking_insert' (request id {request_id}) reached this client after it gave up" in line[0]


@pytest.mark.skipif(not SEES_LATE_ANSWERS, reason="mcp before 1.23 gives nothing to hook: nothing to see either way")
async def test_an_answer_for_a_call_still_waited_for_is_no_late_answer(captured, tmp_path: Path) -> None:
    (tmp_path / "gate").write_text("")  # a plain file: the tool does not wait
    async with calling("sdk", server_command("python", tmp_path)) as call:
        await call()
    assert not [span for span in captured.spans.get_finished_spans() if span.name == "tool.ghost_response"]
    assert captured.points("tool.ghost_responses") == []


def test_only_a_result_says_the_server_did_the_work() -> None:
    assert late_answer(Answer.result(is_tool_error=False)) == "ok"
    assert late_answer(Answer.result(is_tool_error=True)) == "failed"
    assert late_answer(Answer.cancel_ack()) is None  # mcp 1.x's answer to the cancel itself
    assert late_answer(Answer.error(-32602, "unknown tool")) is None  # nothing says anything ran
    assert late_answer(Answer.result(is_tool_error=False, task_status="working")) is None  # a task's own status says
