"""The cancel that crosses the answer. A server that blocks its event loop inside an `async` tool (as published
servers do with sqlite, a subprocess, a conversion) writes its answer and only then reads the cancel its caller
sent meanwhile; the caller's SDK throws that answer away and tells its caller "cancelled", and the caller
retries: the row is written twice. The server's own call is `ok` (it answered); the ghost is a span of its own
under it (`tool.ghost_kind=crossed`), counted, with its WARNING in that span's trace, and the retry links to it.
On the SDK's server and standalone FastMCP, over stdio, on each line; ordered by the protocol and a FIFO, no
sleeps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from examples.otlp_sink import OtlpSink
from tests.frameworks import FASTMCP_MAJOR
from tests.subprocess_servers import call_over_pipe, send_line, stdio_gated_server
from tests.support import GHOST_LINE_PREFIX, until

pytestmark = pytest.mark.anyio

SCOPE = "otel_mcp_cancel"
# The low-level Server's tools are known by its tools/list answer alone: its caller lists them first, as the SDK's
# client does, and every ghost names the tool as the call's own span does.
FRAMEWORKS = ["sdk", "lowlevel", *(["fastmcp"] if FASTMCP_MAJOR is not None else [])]


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_cancel_read_after_the_answer_was_written_is_a_crossed_ghost_and_its_retry_is_linked(
    sink: OtlpSink, tmp_path: Path, framework: str
) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    process = stdio_gated_server(tmp_path, sink.endpoint, framework)
    try:
        if framework == "lowlevel":
            send_line(process, {"id": 0, "method": "tools/list", "params": {}})
            assert "blocking_insert" in process.stdout.readline()
        send_line(process, {"id": 1, "method": "tools/call",
                            "params": {"name": "blocking_insert", "arguments": {"row": "r"}}})
        await until(lambda: (tmp_path / "blocking").exists())  # its loop is blocked from here
        send_line(process, {"method": "notifications/cancelled",
                            "params": {"requestId": 1, "reason": "timed out after 0.5s"}})
        gate.write_text("go")  # the tool returns; its answer is written, then the cancel is read
        gate.unlink()  # the retry runs through
        answer = process.stdout.readline()
        assert '"id":1' in answer.replace(" ", "") and "inserted r" in answer  # the caller's SDK discards it
        call_over_pipe(process, 2, "blocking_insert", {"row": "r"})  # the caller, told "cancelled", retries
        process.stdin.close()
        process.wait(timeout=30)  # the SDK exports everything as the process exits
    finally:
        process.kill()
    assert (tmp_path / "rows").read_text() == "r\nr\n"  # written twice
    calls = {span.attributes["jsonrpc.request.id"]: span for span in sink.server_spans(SCOPE)
             if span.name == "tools/call blocking_insert"}
    assert calls["1"].attributes["tool.outcome"] == "ok" and calls["1"].status == "UNSET"
    assert "tool.handler_outcome" not in calls["1"].attributes
    (ghost,) = [span for span in sink.spans if span.name == "tool.ghost_response"]
    facts = {"tool.handler_outcome": "ok", "tool.ghost_risk": "unsafe", "tool.ghost_kind": "crossed"}
    assert (ghost.kind, ghost.trace_id, ghost.parent_span_id) == ("INTERNAL", calls["1"].trace_id,
                                                                  calls["1"].span_id)
    assert ghost.attributes == {"gen_ai.tool.name": "blocking_insert", "jsonrpc.request.id": "1", **facts}
    assert ghost.events == [("tool.ghost_response", facts)]
    (counted,) = sink.latest_points("tool.ghost_responses")
    assert (counted.attributes, counted.value) == (
        {"mcp.method.name": "tools/call", "gen_ai.tool.name": "blocking_insert", **facts}, 1)
    (line,) = [log for log in sink.logs if str(log.body).startswith(GHOST_LINE_PREFIX)]
    assert (line.trace_id, line.span_id) == (ghost.trace_id, ghost.span_id)
    assert "tool 'blocking_insert'" in line.body and "request id 1" in line.body and "crossed" in line.body
    assert line.attributes["gen_ai.tool.name"] == "blocking_insert"
    # The retry: marked, linked to the ghost, counted.
    retry = calls["2"]
    assert (retry.attributes["tool.outcome"], retry.attributes["tool.retried_ghost_risk"]) == ("ok", "unsafe")
    assert retry.links == [ghost.span_id]
    (retried,) = sink.latest_points("tool.ghost_retries")
    assert (retried.attributes, retried.value) == ({"gen_ai.tool.name": "blocking_insert",
                                                    "tool.ghost_risk": "unsafe"}, 1)
    # The cancel's own span names the call it crossed and links to it.
    (cancel,) = [span for span in sink.server_spans(SCOPE) if span.name == "notifications/cancelled"]
    assert cancel.attributes["tool.cancelled_request_id"] == "1" and cancel.links == [calls["1"].span_id]
