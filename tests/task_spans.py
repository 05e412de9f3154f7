"""Reading a task's telemetry, for the task engines' tests (tests/v1/test_tasks.py, tests/test_fastmcp_tasks.py)."""

from __future__ import annotations

from typing import Any

from tests.conftest import Captured
from tests.support import until

STATUS_EVENT = "mcp.task.status_changed"
GHOST_EVENT = "mcp.ghost_response.suppressed"


def spans_named(captured: Captured, name: str) -> list[Any]:
    return [span for span in captured.spans.get_finished_spans() if span.name == name]


async def task_ended(captured: Captured, tool: str) -> Any:
    """The span of the task running `tool`, once it has ended (the one task of the test)."""
    await until(lambda: spans_named(captured, f"task {tool}") != [])
    (span,) = spans_named(captured, f"task {tool}")
    return span


def events(span: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(event.name, dict(event.attributes)) for event in span.events]


def outcome_points(captured: Captured) -> dict[tuple[tuple[str, Any], ...], int]:
    """tools/call points of the server's operation-duration histogram: their task and outcome attributes,
    and how many calls each counts."""
    points = [p for p in captured.points("mcp.server.operation.duration")
              if p.attributes.get("mcp.method.name") == "tools/call"]
    keys = ("tool.outcome", "mcp.task.status", "error.type")
    return {tuple((key, p.attributes[key]) for key in keys if key in p.attributes): p.count for p in points}
