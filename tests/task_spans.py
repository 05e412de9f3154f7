"""Reading a task's telemetry, for the task engines' tests (tests/v1/test_tasks.py, tests/test_fastmcp_tasks.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from opentelemetry.trace import SpanKind, StatusCode

from tests.conftest import Captured
from tests.support import until

STATUS_EVENT = "tool.task_status_changed"
GHOST_EVENT = "tool.ghost_response"


def spans_named(captured: Captured, name: str) -> list[Any]:
    return [span for span in captured.spans.get_finished_spans() if span.name == name]


def task_spans(captured: Captured, tool: str, side: SpanKind) -> list[Any]:
    """The ended spans of tasks running `tool`, as seen by one side: the children of its creating span."""
    sides = {span.context.span_id for span in captured.spans.get_finished_spans() if span.kind is side}
    return [span for span in spans_named(captured, f"task {tool}") if span.parent.span_id in sides]


async def task_ended(captured: Captured, tool: str, side: SpanKind = SpanKind.SERVER) -> Any:
    """The span of the task running `tool` (the one task of the test), as one side saw it, once it ended."""
    await until(lambda: task_spans(captured, tool, side) != [])
    (span,) = task_spans(captured, tool, side)
    return span


def events(span: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(event.name, dict(event.attributes)) for event in span.events]


def outcome_points(
    captured: Captured, metric: str = "mcp.server.operation.duration"
) -> dict[tuple[tuple[str, Any], ...], int]:
    """tools/call points of an operation-duration histogram: their task and outcome attributes, and how many
    calls each counts."""
    points = [p for p in captured.points(metric)
              if p.attributes.get("mcp.method.name") == "tools/call"]
    keys = ("tool.outcome", "mcp.task.status", "error.type")
    counts: Counter[tuple[tuple[str, Any], ...]] = Counter()
    for point in points:
        counts[tuple((key, point.attributes[key]) for key in keys if key in point.attributes)] += point.count
    return dict(counts)


async def settled(captured: Captured, outcome: str, status: str, metric: str = "mcp.server.operation.duration") -> None:
    """Until a side has recorded a task's outcome (its metric point), whether or not the caller was told."""
    wanted = {("tool.outcome", outcome), ("mcp.task.status", status)}
    await until(lambda: any(wanted <= set(key) for key in outcome_points(captured, metric)))


async def assert_polled_on_a_closed_connection(captured: Captured, tool: str) -> None:
    """A client's poll of its task could not be sent, its connection closed: the poll and the task (as the client
    saw it) failed on the closed connection, as the SDK's CONNECTION_CLOSED; nobody gave up."""
    (poll,) = [span for span in captured.spans.get_finished_spans()
               if span.name == "tasks/get" and span.kind is SpanKind.CLIENT]
    assert (poll.attributes.get("error.type"), poll.status.status_code, poll.status.description) == (
        "-32000", StatusCode.ERROR, "Connection closed")
    viewed = await task_ended(captured, tool, SpanKind.CLIENT)
    assert {key: viewed.attributes.get(key) for key in ("tool.outcome", "tool.cancel_reason", "error.type")} == {
        "tool.outcome": "failed", "tool.cancel_reason": None, "error.type": "-32000"}
    assert (viewed.status.status_code, viewed.status.description) == (
        StatusCode.ERROR, "the connection closed before the task's outcome reached its caller")
