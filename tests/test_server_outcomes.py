"""Every outcome on a real server of either SDK line, driven by a raw JSON-RPC peer over memory streams.

The lines differ in one visible way: mcp 1.x answers a cancel with an
acknowledgement (`ErrorData(code=0, "Request cancelled")`), 2.x writes nothing.

Races are made deterministic: a tool signals that it started and waits for the
test to release it; the test sends the cancel, then a ping, and only releases
the tool once the ping's answer proves the server read the cancel.
"""

from __future__ import annotations

import logging
from importlib.metadata import version
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from packaging.version import Version

from otel_mcp_cancel import ghost_stats
from otel_mcp_cancel.conventions import TOOL_ERROR_DESCRIPTION
from otel_mcp_cancel.instruments import DURATION_BUCKETS
from tests.conftest import instrumented
from tests.frameworks import FRAMEWORKS
from tests.raw_peer import RawPeer, is_error, is_result, raw_peer_over, raw_session, served_in_memory
from tests.servers import Gates, notes_server, raising_lowlevel_server
from tests.support import MCP_MAJOR, assert_ghost_line, until

pytestmark = pytest.mark.anyio

SCOPE = "otel_mcp_cancel"


def tools_call_attributes(peer: RawPeer, request_id: str, tool: str, outcome: str, **extra: Any) -> dict[str, Any]:
    return {
        "mcp.method.name": "tools/call",
        "jsonrpc.request.id": request_id,
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "mcp.protocol.version": peer.protocol_version,
        **peer.named,
        "tool.outcome": outcome,
        **extra,
    }


def assert_no_answer_but_the_acknowledgement(peer: RawPeer, request_id: Any) -> None:
    """What reached the wire for a cancelled request: nothing on 2.x; on 1.x only the SDK's acknowledgement."""
    answers = peer.answers(request_id)
    if MCP_MAJOR == 1:
        assert len(answers) == 1 and is_error(answers[0], 0) and answers[0].error.message == "Request cancelled"
    else:
        assert answers == []


def duration_point(captured, method: str, **attributes: Any):
    points = [
        p
        for p in captured.points("mcp.server.operation.duration")
        if p.attributes.get("mcp.method.name") == method
        and all(p.attributes.get(k) == v for k, v in attributes.items())
    ]
    assert len(points) == 1, [dict(p.attributes) for p in captured.points("mcp.server.operation.duration")]
    return points[0]


async def span_for(captured, request_id: str):
    await until(lambda: any(s.attributes.get("jsonrpc.request.id") == request_id for s in captured.request_spans()))
    (span,) = [s for s in captured.request_spans() if s.attributes.get("jsonrpc.request.id") == request_id]
    return span


async def cancel_and_sync(peer, request_id: Any, reason: str | None, barrier_id: str = "barrier") -> None:
    await peer.cancel(request_id, reason)
    await peer.barrier(barrier_id)


@pytest.fixture
def ghost_log_spans() -> Any:
    """The span current where each line of the plugin's WARNINGs was logged."""
    seen: list[Any] = []

    class CurrentSpan(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno == logging.WARNING:
                seen.append(trace.get_current_span().get_span_context())

    handler = CurrentSpan()
    logging.getLogger("otel_mcp_cancel").addHandler(handler)
    yield seen
    logging.getLogger("otel_mcp_cancel").removeHandler(handler)


async def test_ok(framework, captured) -> None:
    async with raw_session(notes_server(Gates(), framework)) as peer:
        answer = await peer.call(10, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    assert is_result(answer)
    span = await span_for(captured, "10")
    assert span.name == "tools/call echo"
    assert span.instrumentation_scope.name == SCOPE
    assert framework.our_attributes(span) == tools_call_attributes(peer, "10", "echo", "ok")
    assert span.status.status_code is StatusCode.UNSET
    assert framework.our_events(span) == []
    point = duration_point(captured, "tools/call", **{"gen_ai.tool.name": "echo"})
    assert dict(point.attributes) == {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "echo",
        "mcp.protocol.version": peer.protocol_version,
        "mcp.client.name": "raw",  # the peer's name, bounded
        "tool.outcome": "ok",
    }
    assert point.attributes["tool.outcome"] == span.attributes["tool.outcome"]
    assert point.count == 1
    assert list(point.explicit_bounds) == list(DURATION_BUCKETS)


async def test_tool_error_is_failed(framework, captured) -> None:
    async with raw_session(notes_server(Gates(), framework)) as peer:
        answer = await peer.call(11, "tools/call", {"name": "broken", "arguments": {"text": "hi"}})
    assert is_result(answer) and answer.result["isError"] is True
    span = await span_for(captured, "11")
    expected = tools_call_attributes(peer, "11", "broken", "failed", **{"error.type": "tool_error"})
    assert framework.our_attributes(span) == expected
    assert (span.status.status_code, span.status.description) == (StatusCode.ERROR, TOOL_ERROR_DESCRIPTION)
    point = duration_point(captured, "tools/call", **{"gen_ai.tool.name": "broken"})
    assert point.attributes["tool.outcome"] == span.attributes["tool.outcome"] == "failed"
    assert point.attributes["error.type"] == "tool_error"
    # What the tool raised, where the framework runs it (a low-level server's own code answers isError itself):
    # one `exception` event, its type and frames; its message only on opt-in (it may quote the input).
    exceptions = [dict(e.attributes) for e in span.events if e.name == "exception"]
    if framework.name == "lowlevel":
        assert exceptions == []
    else:
        (exception,) = exceptions
        assert exception["exception.type"] == "ValueError" and "exception.message" not in exception
        assert 'raise ValueError("the tool failed")' in exception["exception.stacktrace"]
        assert len(exception["exception.stacktrace"]) <= 4096



async def test_handler_exception_is_a_jsonrpc_error(captured) -> None:
    async with raw_session(raising_lowlevel_server()) as peer:
        answer = await peer.call(12, "tools/call", {"name": "anything", "arguments": {}})
    assert is_error(answer, 0)
    span = await span_for(captured, "12")
    assert dict(span.attributes) == tools_call_attributes(
        peer,
        "12", "anything", "failed", **{"error.type": "0", "rpc.response.status_code": "0"}
    )
    # The JSON-RPC error's message is what a backend's error column shows.
    assert (span.status.status_code, span.status.description) == (StatusCode.ERROR, answer.error.message)
    assert answer.error.message
    # A low-level server without a schema lookup has not listed "anything": it folds.
    assert span.name == "tools/call"


async def test_invalid_params_is_failed_but_the_callers_fault(framework, captured) -> None:
    async with raw_session(notes_server(Gates(), framework)) as peer:
        answer = await peer.call(13, "tools/call", {"arguments": {}})
    assert is_error(answer, -32602)
    span = await span_for(captured, "13")
    assert framework.our_attributes(span) == {
        "mcp.method.name": "tools/call",
        "jsonrpc.request.id": "13",
        "gen_ai.operation.name": "execute_tool",
        "mcp.protocol.version": peer.protocol_version,
        **peer.named,
        "tool.outcome": "failed",
        "error.type": "-32602",
        "rpc.response.status_code": "-32602",
    }
    assert span.status.status_code is StatusCode.UNSET


async def test_unknown_method_is_unset(framework, captured) -> None:
    """mcp 2.x answers it METHOD_NOT_FOUND; 1.x refuses it INVALID_PARAMS in its receive loop, before any
    handler: either way the caller's fault, and its span and point say which error it was answered."""
    async with raw_session(notes_server(Gates(), framework)) as peer:
        answer = await peer.call(14, "no/such/method", {})
    code = -32601 if MCP_MAJOR == 2 else -32602
    assert is_error(answer, code)
    span = await span_for(captured, "14")
    assert span.name == "_OTHER"
    assert framework.our_attributes(span) == {
        "mcp.method.name": "_OTHER",
        "mcp.method.name_original": "no/such/method",
        "jsonrpc.request.id": "14",
        "mcp.protocol.version": peer.protocol_version,
        **peer.named,
        "error.type": str(code),
        "rpc.response.status_code": str(code),
    }
    assert span.status.status_code is StatusCode.UNSET
    point = duration_point(captured, "_OTHER")
    assert point.attributes["error.type"] == str(code)


async def test_cancel_interrupts_the_handler(framework, captured, plugin_log) -> None:
    gates = Gates()
    before = ghost_stats().total
    async with raw_session(notes_server(gates, framework)) as peer:
        await peer.request(20, "tools/call", {"name": "slow", "arguments": {"text": "hi"}})
        await gates.started.wait()
        await cancel_and_sync(peer, 20, "user pressed stop")
        span = await span_for(captured, "20")
        assert_no_answer_but_the_acknowledgement(peer, 20)
    assert framework.our_attributes(span) == tools_call_attributes(peer, "20", "slow", "cancelled")
    assert span.status.status_code is StatusCode.UNSET
    assert framework.our_events(span) == [("tool.request_cancelled", {"tool.cancel_message": "user pressed stop"})]
    point = duration_point(captured, "tools/call", **{"gen_ai.tool.name": "slow"})
    assert point.attributes["tool.outcome"] == span.attributes["tool.outcome"] == "cancelled"
    assert "error.type" not in point.attributes
    assert captured.points("tool.ghost_responses") == []
    assert ghost_stats().total == before
    assert plugin_log() == []


@pytest.mark.skipif(MCP_MAJOR == 1 and Version(version("mcp")) < Version("1.30"),
                    reason="before mcp 1.30 a session's end leaves its handlers running: this one never ends")
async def test_a_call_sent_as_its_caller_hung_up_is_cancelled(captured) -> None:
    """Its caller sent it and closed its stream at once: the session read both before the handler began (on
    mcp 1.x its handler starts tasks later), then cancelled its handlers as the session ended. Its caller gave up,
    as did those of calls in flight when it left: cancelled, not a failure of the server's."""
    async with served_in_memory(notes_server(Gates())) as (read, write), raw_peer_over(read, write) as peer:
        await peer.request(5, "tools/call", {"name": "slow", "arguments": {"text": "hi"}})
        await write.aclose()
        span = await span_for(captured, "5")
    assert dict(span.attributes) == tools_call_attributes(peer, "5", "slow", "cancelled")
    assert span.status.status_code is StatusCode.UNSET
    assert [(event.name, dict(event.attributes)) for event in span.events] == [("tool.request_cancelled", {})]
    assert duration_point(captured, "tools/call").attributes["tool.outcome"] == "cancelled"


@pytest.mark.parametrize(
    ("tool", "handler_outcome"),
    [
        ("shielded_write", "ok"),
        ("shielded_broken", "failed"),
        ("sync_write", "ok"),
    ],
)
async def test_ghost(framework, captured, plugin_log, ghost_log_spans, tool: str, handler_outcome: str) -> None:
    if tool == "sync_write" and not framework.sync_tools_in_thread:
        pytest.skip(f"{framework} runs sync tools on the event loop: nothing, not even this test, runs meanwhile")
    gates = Gates()
    before = ghost_stats().total
    async with raw_session(notes_server(gates, framework)) as peer:
        await peer.request(30, "tools/call", {"name": tool, "arguments": {"path": "note.md"}})
        await until(lambda: gates.started.is_set() or gates.thread_started.is_set())
        await cancel_and_sync(peer, 30, "timed out after 1.0s")
        gates.let_go()
        span = await span_for(captured, "30")
        await peer.barrier("after")
        assert_no_answer_but_the_acknowledgement(peer, 30)
    assert gates.side_effects == ["note.md"]
    ghost = {"tool.handler_outcome": handler_outcome, "tool.ghost_risk": "unknown", "tool.ghost_kind": "suppressed"}
    # On the span as attributes too: stores and spanmetrics that index attributes only can find it.
    assert framework.our_attributes(span) == tools_call_attributes(peer, "30", tool, "cancelled", **ghost)
    assert span.status.status_code is StatusCode.UNSET
    assert framework.our_events(span) == [
        ("tool.request_cancelled", {"tool.cancel_message": "timed out after 1.0s"}),
        ("tool.ghost_response", {"tool.handler_outcome": handler_outcome, "tool.ghost_risk": "unknown",
                                 "tool.ghost_kind": "suppressed"}),
    ]
    (ghosts,) = captured.points("tool.ghost_responses")
    assert dict(ghosts.attributes) == {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": tool,
        "tool.handler_outcome": handler_outcome,
        "tool.ghost_risk": "unknown", "tool.ghost_kind": "suppressed",
    }
    assert ghosts.value == 1
    assert ghosts.attributes["tool.handler_outcome"] == framework.our_events(span)[1][1]["tool.handler_outcome"]
    point = duration_point(captured, "tools/call", **{"gen_ai.tool.name": tool})
    assert point.attributes["tool.outcome"] == span.attributes["tool.outcome"] == "cancelled"
    (line,) = plugin_log()
    assert_ghost_line(line, tool, 30)
    # The facts as log attributes, logged in the ghost span's context (an OTLP log record carries its ids).
    facts = {"mcp.method.name": "tools/call", "gen_ai.tool.name": tool, "jsonrpc.request.id": "30", **ghost}
    assert {key: getattr(line, key) for key in facts} == facts
    assert ghost_log_spans == [span.context]
    stats = ghost_stats()
    assert stats.total == before + 1 and stats.last_tool == tool and stats.last_seen is not None


async def test_cancel_after_the_answer_changes_nothing(framework, captured) -> None:
    async with raw_session(notes_server(Gates(), framework)) as peer:
        await peer.call(40, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        await cancel_and_sync(peer, 40, "too late")
        assert len(peer.answers(40)) == 1
    span = await span_for(captured, "40")
    assert span.attributes["tool.outcome"] == "ok"
    assert framework.our_events(span) == []


async def test_a_cancel_while_the_answer_is_being_written_changes_nothing(framework, captured) -> None:
    """The peer stops reading, so the server's answer write blocks; then the cancel arrives.
    2.x has already forgotten the request; on 1.x the guard drops the cancel, which would otherwise
    interrupt the write and send a second answer."""
    async with raw_session(notes_server(Gates(), framework)) as peer:
        await peer.request_with_its_answer_blocked(44, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        await peer.cancel(44, "too late")
        peer.resume_reading()
        await peer.barrier("after")
        (answer,) = peer.answers(44)
        assert is_result(answer)
    span = await span_for(captured, "44")
    assert span.attributes["tool.outcome"] == "ok"
    assert framework.our_events(span) == []


async def test_cancel_without_a_reason(framework, captured) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates, framework)) as peer:
        await peer.request(41, "tools/call", {"name": "slow", "arguments": {"text": "hi"}})
        await gates.started.wait()
        await cancel_and_sync(peer, 41, None)
        span = await span_for(captured, "41")
    assert span.attributes["tool.outcome"] == "cancelled"
    assert framework.our_events(span) == [("tool.request_cancelled", {})]


async def test_a_megabyte_reason_is_cut_to_256_characters(framework, captured) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates, framework)) as peer:
        await peer.request(42, "tools/call", {"name": "slow", "arguments": {"text": "hi"}})
        await gates.started.wait()
        await cancel_and_sync(peer, 42, "r" * 1_000_000)
        span = await span_for(captured, "42")
    assert framework.our_events(span) == [("tool.request_cancelled", {"tool.cancel_message": "r" * 256})]
    point = duration_point(captured, "tools/call", **{"gen_ai.tool.name": "slow"})
    assert all(len(str(value)) < 100 for value in point.attributes.values())


async def test_unknown_tool_folds_to_other_on_metrics(framework, captured) -> None:
    async with raw_session(notes_server(Gates(), framework)) as peer:
        await peer.call(43, "tools/call", {"name": "no_such_tool", "arguments": {}})
    span = await span_for(captured, "43")
    assert span.name == "tools/call"
    assert span.attributes["gen_ai.tool.name"] == "no_such_tool"
    assert span.attributes["tool.outcome"] == "failed"
    point = duration_point(captured, "tools/call", **{"gen_ai.tool.name": "_OTHER"})
    assert point.attributes["tool.outcome"] == "failed"


async def test_other_methods_get_cancel_and_ghost_handling_without_tool_outcome(
    framework, captured, plugin_log
) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates, framework)) as peer:
        await peer.request(50, "resources/read", {"uri": "notes://today"})
        await gates.started.wait()
        await cancel_and_sync(peer, 50, "navigated away")
        gates.let_go()
        span = await span_for(captured, "50")
        assert_no_answer_but_the_acknowledgement(peer, 50)
    assert framework.our_attributes(span) == {
        "mcp.method.name": "resources/read",
        "jsonrpc.request.id": "50",
        "mcp.resource.uri": "notes://today",
        "mcp.protocol.version": peer.protocol_version,
        **peer.named,
        "tool.handler_outcome": "ok",
        "tool.ghost_risk": "none", "tool.ghost_kind": "suppressed",
    }
    assert framework.our_events(span) == [
        ("tool.request_cancelled", {"tool.cancel_message": "navigated away"}),
        ("tool.ghost_response", {"tool.handler_outcome": "ok", "tool.ghost_risk": "none",
                                 "tool.ghost_kind": "suppressed"}),
    ]
    (ghosts,) = captured.points("tool.ghost_responses")
    assert dict(ghosts.attributes) == {
        "mcp.method.name": "resources/read",
        "tool.handler_outcome": "ok",
        "tool.ghost_risk": "none", "tool.ghost_kind": "suppressed",
    }
    assert "tool.outcome" not in duration_point(captured, "resources/read").attributes
    assert len(plugin_log()) == 1


async def test_traceparent_in_meta_parents_the_server_span(framework, captured) -> None:
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    parent = "b7ad6b7169203331"
    meta = {"traceparent": f"00-{trace_id}-{parent}-01"}
    async with raw_session(notes_server(Gates(), framework)) as peer:
        await peer.call(60, "tools/call", {"name": "echo", "arguments": {"text": "hi"}, "_meta": meta})
    span = await span_for(captured, "60")
    assert format(span.context.trace_id, "032x") == trace_id
    assert format(span.parent.span_id, "016x") == parent




async def test_a_cancel_notification_has_one_span_linked_to_the_request_it_cancels(framework, captured) -> None:
    gates = Gates()
    async with raw_session(notes_server(gates, framework)) as peer:
        await peer.request(70, "tools/call", {"name": "slow", "arguments": {"text": "x"}})
        await gates.started.wait()
        await cancel_and_sync(peer, 70, "user pressed stop")
        cancelled = await span_for(captured, "70")
    (notification,) = [s for s in captured.spans.get_finished_spans() if s.name == "notifications/cancelled"]
    assert notification.instrumentation_scope.name == SCOPE  # on 2.x the SDK's own span stepped aside
    # A notification has no jsonrpc.request.id; the id of the request it cancels has a name of its own (for
    # stores that drop links), and the peer's free text is on an event, never an attribute.
    assert dict(notification.attributes) == {
        "mcp.method.name": "notifications/cancelled",
        "tool.cancelled_request_id": "70",
    }
    assert [(e.name, dict(e.attributes)) for e in notification.events] == [
        ("tool.cancel_received", {"tool.cancel_message": "user pressed stop"})]
    assert [link.context for link in notification.links] == [cancelled.context]


# The RPC conventions' transition (core v1.45.0, under semantic-conventions-genai v0.1.0): the opt-in's values.
STATUS_CODE_NAMES = {
    None: {"rpc.response.status_code"},
    "rpc": {"rpc.status_code"},
    "http,rpc/dup": {"rpc.response.status_code", "rpc.status_code"},
    "rpc,rpc/dup": {"rpc.response.status_code", "rpc.status_code"},  # dup wins
}


@pytest.mark.parametrize("opt_in", list(STATUS_CODE_NAMES))
async def test_the_stability_opt_in_names_the_error_code(monkeypatch, opt_in: str | None) -> None:
    environment = {} if opt_in is None else {"OTEL_SEMCONV_STABILITY_OPT_IN": opt_in}
    with instrumented(monkeypatch, **environment) as captured:
        async with raw_session(notes_server(Gates(), FRAMEWORKS[0])) as peer:
            assert is_error(await peer.call(13, "tools/call", {"arguments": {}}), -32602)
        span = await span_for(captured, "13")
        point = duration_point(captured, "tools/call")
    names = STATUS_CODE_NAMES[opt_in]
    for attributes in (span.attributes, point.attributes):
        found = {key: value for key, value in attributes.items() if key.startswith("rpc.")}
        assert found == dict.fromkeys(names, "-32602")
    assert (span.attributes["error.type"], point.attributes["error.type"]) == ("-32602", "-32602")
    # The schema URL follows the names: core v1.45.0 once `rpc.status_code` is written, else 1.41.0.
    release = "1.45.0" if "rpc.status_code" in names else "1.41.0"
    assert span.instrumentation_scope.schema_url == f"https://opentelemetry.io/schemas/{release}"
