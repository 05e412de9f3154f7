"""A task-augmented tools/call (MCP tasks): the task's life as a span, its outcome when it reaches a terminal
status, and its ghosts.

The `tools/call` that creates a task is answered at once with the task's handle; that answer is no tool
outcome (its span and metric point carry `mcp.task.status`, not `tool.outcome`). The task gets a span of
its own, a child of the creating span, from creation to its terminal status, which `outcome.classify_task`
turns into `tool.outcome` on that span and on a point of the operation-duration histogram.

Facts arrive from two sides and in any order: an engine's hooks (how the work ended, the terminal status
it stored) and the wire, seen by the server's request hooks (the creation, `tasks/cancel`, `tasks/get`,
`tasks/result`). A task is settled once, at its first terminal status; its span ends when the work it
watches has ended too, so work that runs on after a cancel is seen finishing: a ghost.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode, Tracer

from otel_mcp_cancel.attributes import (
    bounded,
    is_tool_error,
    message_field,
    metric_attributes,
    span_name,
    verdict_attributes,
)
from otel_mcp_cancel.conventions import (
    CANCEL_REASON_CALLER,
    EVENT_TASK_STATUS,
    GEN_AI_OPERATION_EXECUTE_TOOL,
    GEN_AI_OPERATION_NAME,
    GEN_AI_TOOL_NAME,
    MCP_CANCEL_REASON,
    MCP_METHOD_NAME,
    MCP_TASK_ID,
    MCP_TASK_STATUS,
    MCP_TASK_STATUS_MESSAGE,
    TASK_CANCELLED,
    TASK_COMPLETED,
    TASKS_CANCEL,
    TASKS_GET,
    TASKS_RESULT,
    TERMINAL_TASK_STATUSES,
    TOOLS_CALL,
)
from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.outcome import AnswerKind, HandlerEnd, Verdict, classify_task, late_cancel_ghost, task_status
from otel_mcp_cancel.request_state import RequestRecord, metric_fields

if TYPE_CHECKING:
    from otel_mcp_cancel.request_telemetry import RequestTelemetry
    from otel_mcp_cancel.server_telemetry import ServerTelemetry

# Tasks followed at once, settled ones included (a late `tasks/cancel` is judged against them); oldest out.
CAPACITY = 10_000
TASK_SPAN_PREFIX = "task"


@dataclass(eq=False)
class TaskRecord:
    task_id: str
    creation: RequestRecord  # the tools/call that created it: its tool, session and arguments, its metric fields
    span: Span
    work_watched: bool  # an engine's hook reports how the work ends
    work: HandlerEnd | None = None
    status: str | None = None  # the terminal status, once reached
    is_tool_error: bool = False
    result_fetched: bool = False
    gave_up: bool = False  # a client's session ended before it learned how the task ended
    verdict: Verdict | None = None

    @property
    def settled(self) -> bool:
        return self.verdict is not None


class TaskTelemetry:
    """One side's tasks, by id: the server's (with ghosts) or a client's (its view: what it was told).
    Every entry point is contained by its caller or here."""

    def __init__(
        self, tracer: Tracer, side: RequestTelemetry, cancelled_is_error: bool, ghosts: ServerTelemetry | None
    ) -> None:
        self._tracer = tracer
        self._side = side  # records the duration point in its own histogram
        self._ghosts = ghosts  # the server reports ghosts; a client sees none
        self._cancelled_is_error = cancelled_is_error
        self._lock = threading.Lock()
        self._tasks: OrderedDict[str, TaskRecord] = OrderedDict()

    def begin(self, creation: RequestRecord, task_id: str, *, work_watched: bool) -> TaskRecord:
        """The task `creation` created: start its span (once), a child of the creating span."""
        with self._lock:
            task = self._tasks.get(task_id)
        if task is not None:
            return task
        attributes: dict[str, Any] = {MCP_METHOD_NAME: TOOLS_CALL, GEN_AI_OPERATION_NAME: GEN_AI_OPERATION_EXECUTE_TOOL,
                                      MCP_TASK_ID: task_id}
        if creation.target is not None:
            attributes[GEN_AI_TOOL_NAME] = creation.target
        span = self._tracer.start_span(
            span_name(TASK_SPAN_PREFIX, creation.target, target_registered=False),
            context=trace.set_span_in_context(creation.span),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        task = TaskRecord(task_id, creation, span, work_watched)
        with self._lock:
            self._tasks[task_id] = task
            evicted = self._tasks.popitem(last=False)[1] if len(self._tasks) > CAPACITY else None
        if evicted is not None and evicted.span.is_recording():
            evicted.span.end()  # no verdict rather than a guessed one
        return task

    def find(self, task_id: str | None) -> TaskRecord | None:
        with self._lock:
            return None if task_id is None else self._tasks.get(task_id)

    def link_work(self, task_id: str, work: SpanContext) -> None:
        """Link the task's span to the span an engine ran (a leg of) its work in (Docket's worker span)."""
        task = self.find(task_id)
        if task is not None and work.is_valid and task.span.is_recording():
            task.span.add_link(work)

    def work_ended(self, task_id: str, end: HandlerEnd) -> None:
        """An engine's hook saw the task's work end."""
        task = self.find(task_id)
        if task is None or task.work is not None:
            return
        task.work = end
        if task.settled:
            self._end(task)
        elif end is HandlerEnd.INTERRUPTED:
            self._settle(task)  # nothing will store a terminal status for work that was stopped

    def reached(self, task_id: str, status: object, *, is_tool_error: bool = False, message: object = None) -> None:
        """The task reached `status`; the first terminal status settles it (the spec allows no other after)."""
        task = self.find(task_id)
        if task is None or task.settled:
            return
        status = task_status(status)
        event: dict[str, Any] = {MCP_TASK_STATUS: status}
        if isinstance(message, str):
            event[MCP_TASK_STATUS_MESSAGE] = bounded(message)
        task.span.add_event(EVENT_TASK_STATUS, event)
        if status in TERMINAL_TASK_STATUSES:
            task.status, task.is_tool_error = status, is_tool_error
            self._settle(task)

    def observe(self, record: RequestRecord, verdict: Verdict) -> None:
        """What a concluded request tells of a task: the creation itself, or a `tasks/*` request naming one."""
        if record.task_id is None:
            return
        if record.method == TOOLS_CALL:
            if verdict.task_status is not None:
                task = self.begin(record, record.task_id, work_watched=False)
                self.reached(task.task_id, verdict.task_status)
            return
        task = self.find(record.task_id)
        if task is None:
            return
        record.span.add_link(task.span.get_span_context())
        answered = record.answer is not None and record.answer.kind is AnswerKind.RESULT
        if record.method == TASKS_CANCEL:
            self._cancel_answered(task, record, accepted=answered)
        elif record.method == TASKS_RESULT and answered:
            task.result_fetched = True
            if not task.work_watched:  # 2025-11-25: the payload is what the call would have answered
                self.reached(task.task_id, TASK_COMPLETED, is_tool_error=is_tool_error(record.result))
        elif record.method == TASKS_GET and answered:
            self._polled(task, record.result)

    def gave_up(self, session: object) -> None:
        """A client session ended: its tasks not yet settled end as what its caller got, nothing (cancelled,
        `mcp.cancel.reason=caller`). The server may still run them."""
        with self._lock:
            left = [task for task in self._tasks.values() if task.creation.session is session and not task.settled]
        for task in left:
            task.gave_up = True
            task.span.set_attribute(MCP_CANCEL_REASON, CANCEL_REASON_CALLER)
            self._settle(task)

    def _polled(self, task: TaskRecord, polled: object) -> None:
        """A `tasks/get` answer: the task's status (when no engine hook tells better), and (2026-07-28
        extension) its result inline: then the caller has its answer."""
        inline = message_field(polled, "result")
        if not task.work_watched:
            self.reached(
                task.task_id,
                message_field(polled, "status"),
                is_tool_error=inline is not None and message_field(inline, "isError") is True,
                message=message_field(polled, "statusMessage"),
            )
        if inline is not None or message_field(polled, "error") is not None:
            task.result_fetched = True

    def _cancel_answered(self, task: TaskRecord, record: RequestRecord, *, accepted: bool) -> None:
        if task.settled:
            # The caller believes it stopped work that had already happened (2025-11-25 rejects it; the
            # 2026-07-28 extension acknowledges it).
            handler_outcome = late_cancel_ghost(task.status, task.work, task.result_fetched)
            if handler_outcome is not None and self._ghosts is not None:
                risk = self._ghosts.mark_ghost(task.creation, record.span, handler_outcome)
                with contained("reporting a task's ghost"):
                    self._ghosts.report_ghost(task.creation, handler_outcome, risk, record.span)
        elif accepted:
            self.reached(task.task_id, TASK_CANCELLED)

    def _settle(self, task: TaskRecord) -> None:
        """Record the task's outcome on its span and the duration metric; end the span unless its work runs on."""
        verdict = classify_task(task.status, task.work, task.is_tool_error, gave_up=task.gave_up,
                                cancelled_is_error=self._cancelled_is_error)
        task.verdict = verdict
        creation, span = task.creation, task.span
        outcome = verdict_attributes(TOOLS_CALL, verdict)
        with contained("recording a task's outcome"):
            registered = creation.tool_registered
            span.update_name(span_name(TASK_SPAN_PREFIX, creation.target, target_registered=registered))
            span.set_attributes(outcome)
            if verdict.span_error:
                span.set_status(Status(StatusCode.ERROR, verdict.description))
        with contained("measuring a task"), trace.use_span(span, record_exception=False, set_status_on_exception=False):
            attributes = metric_attributes(*metric_fields(creation), tuple(outcome.items()))
            self._side.record_duration(time.perf_counter() - creation.started, attributes)
        if not task.work_watched or task.work is not None:
            self._end(task)

    def _end(self, task: TaskRecord) -> None:
        """End the task's span, once its verdict and its work are known; work done after a cancel is a ghost."""
        if not task.span.is_recording():
            return
        verdict = classify_task(task.status, task.work, task.is_tool_error)
        if verdict.ghost_handler_outcome is not None and self._ghosts is not None:
            risk = self._ghosts.mark_ghost(task.creation, task.span, verdict.ghost_handler_outcome)
            with contained("reporting a task's ghost"):
                self._ghosts.report_ghost(task.creation, verdict.ghost_handler_outcome, risk, task.span)
        task.span.end()
