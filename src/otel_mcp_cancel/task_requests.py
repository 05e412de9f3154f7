"""What requests about a task tell of it, as each is concluded or its answer written: the `tools/call` that created
it, and the `tasks/get`, `tasks/result` and `tasks/cancel` that name it; on the server, and as a client saw them.
The task's life itself (its status, its span, its ghosts) is `task_telemetry`'s."""

from __future__ import annotations

from otel_mcp_cancel.answers import AnswerKind
from otel_mcp_cancel.conventions import (
    ERROR_TYPE_CONNECTION_CLOSED,
    GHOST_KIND_TASK_CANCEL_LATE,
    OUTCOME_CANCELLED,
    TASK_COMPLETED,
    TASK_FAILED,
    TASKS_CANCEL,
    TASKS_GET,
    TASKS_RESULT,
    TOOLS_CALL,
)
from otel_mcp_cancel.messages import is_tool_error, message_field
from otel_mcp_cancel.outcome import GAVE_UP_CONNECTION_LOST, Verdict, undelivered_ghost
from otel_mcp_cancel.request_state import RequestRecord
from otel_mcp_cancel.task_record import TaskRecord
from otel_mcp_cancel.task_telemetry import TaskTelemetry


class TaskRequests:
    """One side's requests about its tasks (`tasks`). Every entry point is contained by its caller."""

    def __init__(self, tasks: TaskTelemetry) -> None:
        self.tasks = tasks

    def observe(self, record: RequestRecord, verdict: Verdict) -> None:
        """What a concluded request tells of a task: the creation itself, or a `tasks/*` request naming one."""
        if record.task_id is None:
            return
        if record.method == TOOLS_CALL:
            if verdict.task_status is not None:
                task = self.tasks.begin(record, record.task_id, work_watched=False)
                task.announced, task.ttl = True, record.task_ttl  # an engine hook may have begun it earlier
                if task.settled:  # it finished before its creating request was concluded
                    self.tasks.name_and_measure(task)
                self.tasks.reached(task.task_id, verdict.task_status)
                self.tasks.maybe_end(task)
            return
        found = self.tasks.find(record.task_id)
        if found is None:
            return
        task = found
        record.span.add_link(task.span.get_span_context())
        answered = record.answer is not None and record.answer.kind is AnswerKind.RESULT
        if record.method == TASKS_CANCEL:
            self._cancel_answered(task, record, accepted=answered)
        elif record.method == TASKS_RESULT and record.answer is not None:
            if answered and not task.work_watched:  # 2025-11-25: the payload is what the call would have answered
                self.tasks.reached(task.task_id, TASK_COMPLETED, is_tool_error=is_tool_error(record.result))
            self._seen(task)  # its result, or its failure
        elif record.method == TASKS_GET and answered:
            self._polled(task, record.result)

    def answered(self, record: RequestRecord) -> None:
        """A `tasks/*` request's result is being written: a caller told its task finished knows it as of now,
        whatever it sends next (this request is concluded later)."""
        task = self.tasks.find(record.task_id)
        if task is None:
            return
        told = record.method == TASKS_RESULT or (
            record.method == TASKS_GET and message_field(record.result, "status") in (TASK_COMPLETED, TASK_FAILED)
        )
        if told:
            self._seen(task)

    def waited(self, record: RequestRecord, verdict: Verdict) -> None:
        """A client's request about a task (its creation, or a `tasks/*` one) ended: how, when unanswered."""
        task = self.tasks.find(record.task_id) if record.task_id is not None else None
        if task is None or task.settled:
            return
        if verdict.outcome == OUTCOME_CANCELLED and record.cancel_reason is not None:
            task.last_wait = record.cancel_reason  # its own: timeout | caller
        elif verdict.error_type == ERROR_TYPE_CONNECTION_CLOSED:
            task.last_wait = GAVE_UP_CONNECTION_LOST
        else:
            task.last_wait = None

    def _polled(self, task: TaskRecord, polled: object) -> None:
        """A `tasks/get` answer: the task's status (when no engine hook tells better). A caller told that its
        task finished (completed or failed; on the 2026-07-28 extension with the result inline) knows the
        work happened."""
        status = message_field(polled, "status")
        inline = message_field(polled, "result")
        if not task.work_watched and status == TASK_COMPLETED and inline is None:
            # 2025-11-25: `completed` says the work ended, not how; its result (`tasks/result`) settles it.
            self.tasks.noted(task, status)
            task.result_pending = True
        elif not task.work_watched:
            self.tasks.reached(
                task.task_id,
                status,
                is_tool_error=inline is not None and message_field(inline, "isError") is True,
                message=message_field(polled, "statusMessage"),
            )
        if status in (TASK_COMPLETED, TASK_FAILED):
            self._seen(task)

    def _seen(self, task: TaskRecord) -> None:
        task.outcome_seen = True
        self.tasks.maybe_end(task)

    def _cancel_answered(self, task: TaskRecord, record: RequestRecord, *, accepted: bool) -> None:
        self.tasks.settle_pending(task)  # told it completed: a cancel now comes after its end
        if task.settled:
            # The caller believes it stopped work that had already happened (2025-11-25 rejects it; the
            # 2026-07-28 extension acknowledges it).
            handler_outcome = undelivered_ghost(task.status, task.work, task.outcome_seen or task.ghosted)
            if handler_outcome is not None and self.tasks.ghosts is not None:
                task.ghosted = True
                self.tasks.ghosts.task_ghost(task.creation, record.span, handler_outcome, GHOST_KIND_TASK_CANCEL_LATE,
                                        "the caller cancelled after the task had finished")
                self.tasks.maybe_end(task)
        elif accepted and (status := message_field(record.result, "status")) is not None:
            # 2025-11-25 answers with the task's status; the 2026-07-28 extension's empty acknowledgement is
            # best-effort, and the next status the caller is told decides.
            self.tasks.reached(task.task_id, status)
