"""One request's conclusion, stage by stage, with the OpenTelemetry SDK's own providers and no MCP session: the
order of the stages, each observer contained on its own, and a ghost found after its call ended emitted from its
subject alone (no record, no session)."""

from __future__ import annotations

import gc
import logging
import weakref
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_mcp_cancel.answers import Answer, HandlerEnd
from otel_mcp_cancel.client_telemetry import ClientTelemetry
from otel_mcp_cancel.conventions import GHOST_KIND_CROSSED
from otel_mcp_cancel.instruments import create_instruments
from otel_mcp_cancel.liveness import Recording
from otel_mcp_cancel.request_telemetry import SpanOptions
from otel_mcp_cancel.retries import RecentCalls
from otel_mcp_cancel.server_telemetry import ServerTelemetry
from otel_mcp_cancel.user_hooks import UserHooks


class Stack:
    def __init__(self, response_hook: Any = None) -> None:
        self.spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        meter_provider = MeterProvider(metric_readers=[self.reader])
        tracer, meter = tracer_provider.get_tracer("test"), meter_provider.get_meter("test")
        options = SpanOptions(cancelled_is_error=False, capture_content=False,
                              user_hooks=UserHooks(None, response_hook), recording=Recording(tracer, meter))
        instruments = create_instruments(meter)
        self.server = ServerTelemetry(tracer, instruments, RecentCalls(300), options)
        self.client = ClientTelemetry(tracer, instruments, options, RecentCalls(300))

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        return [point for resource in data.resource_metrics for scope in resource.scope_metrics
                for metric in scope.metrics if metric.name == name for point in metric.data.data_points]


class Session:
    """A server session, as the plugin sees one: any object."""


def call(stack: Stack, session: object, request_id: int = 1) -> Any:
    record = stack.server.open("tools/call", {"name": "echo", "arguments": {"text": "x"}}, request_id, None)
    assert record is not None
    record.session = session
    record.tool_registered = True
    record.note_handler(HandlerEnd.RETURNED)
    record.note_answer(Answer.result(False))
    return record


def test_the_stages_run_in_order_and_a_failing_observer_costs_only_itself(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []
    stack = Stack(response_hook=lambda span, request, response: seen.append("user hook"))

    def broken(record: Any, verdict: Any) -> None:
        seen.append("broken observer")
        raise RuntimeError("a defect of ours")

    def later(record: Any, verdict: Any) -> None:
        seen.append(f"observer after it ({verdict.outcome}, span open: {record.span.is_recording()})")

    stack.server.observers = (("observing badly", broken), ("observing", later))
    record = call(stack, Session())
    assert stack.server.conclude(record) is True
    assert seen == ["broken observer", "observer after it (ok, span open: True)", "user hook"]
    (span,) = stack.spans.get_finished_spans()
    assert (span.name, span.attributes["tool.outcome"]) == ("tools/call echo", "ok")
    (point,) = stack.points("mcp.server.operation.duration")
    assert point.attributes["tool.outcome"] == "ok" and point.count == 1
    faults = [line.getMessage() for line in caplog.records if line.name == "otel_mcp_cancel"]
    assert faults == ["otel_mcp_cancel: observing badly failed; the MCP request itself is unaffected"]


def test_a_cancel_that_crosses_a_concluded_answer_is_one_crossed_ghost_from_its_subject_alone() -> None:
    stack = Stack()
    session = Session()
    record = call(stack, session, 7)
    stack.server.answering(record)  # its answer is being written
    stack.server.conclude(record)
    call_span = record.span.get_span_context()
    records, sessions = weakref.ref(record), weakref.ref(session)
    del record
    gc.collect()
    assert records() is None  # what the crossing remembers holds no record
    stack.server.cancel_received(None, 7, "timed out", None, session)
    stack.server.cancel_received(None, 7, "timed out", None, session)  # a duplicate: taken once
    ghosts = [span for span in stack.spans.get_finished_spans() if span.name == "tool.ghost_response"]
    assert [(ghost.parent.span_id, dict(ghost.attributes)) for ghost in ghosts] == [(call_span.span_id, {
        "gen_ai.tool.name": "echo", "jsonrpc.request.id": "7", "tool.ghost_kind": GHOST_KIND_CROSSED,
        "tool.handler_outcome": "ok", "tool.ghost_risk": "unknown"})]
    (counted,) = stack.points("tool.ghost_responses")
    assert counted.value == 1 and counted.attributes["tool.ghost_kind"] == GHOST_KIND_CROSSED
    del session
    gc.collect()
    assert sessions() is None  # nor its session, whose ghost it remembers for retries


def test_a_client_given_up_call_leaves_a_late_answer_subject_and_no_record(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="otel_mcp_cancel")
    stack = Stack()
    stream = Session()
    record = stack.client.open("tools/call", {"name": "slow", "arguments": {"secret": "s3"}}, 4, None)
    assert record is not None
    record.session = stream
    record.note_cancel("timeout")
    stack.client.gave_up(record)
    stack.client.conclude(record)
    records = weakref.ref(record)
    del record
    gc.collect()
    assert records() is None
    stack.client.answered_late(stream, 4, Answer.result(False))
    (ghost,) = [span for span in stack.spans.get_finished_spans() if span.name == "tool.ghost_response"]
    assert ghost.attributes["tool.ghost_kind"] == "late_answer" and ghost.attributes["tool.cancel_reason"] == "timeout"
    (line,) = [line.getMessage() for line in caplog.records if line.name == "otel_mcp_cancel"]
    assert "s3" not in line and "request id 4" in line
