"""A task-augmented tools/call (MCP tasks): the task's life as a span of its own (a child of the creating call's,
whose answer is the task's handle, no tool outcome), its outcome when it reaches a terminal status
(`outcome.classify_task`, on that span and on a point of the side's operation-duration histogram), and its ghosts.

Facts come in any order from an engine's hooks (how the work ended, the status it stored) and from the requests
about the task (`task_requests`). A task is settled once, at its first terminal status; its span ends once the work
an engine hook watches has ended too and, where its caller must fetch the outcome, once it was told or never can be.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanContext, SpanKind, Tracer

from otel_mcp_cancel import conclusion
from otel_mcp_cancel.answers import HandlerEnd
from otel_mcp_cancel.attributes import bounded, span_name, verdict_attributes
from otel_mcp_cancel.conventions import (
    CANCEL_REASON_CALLER,
    CANCEL_REASON_TIMEOUT,
    EVENT_TASK_STATUS,
    GEN_AI_OPERATION_EXECUTE_TOOL,
    GEN_AI_OPERATION_NAME,
    GEN_AI_TOOL_NAME,
    GHOST_KIND_TASK_CANCELLED,
    GHOST_KIND_TASK_EXPIRED,
    GHOST_KIND_TASK_PROCESS_ENDED,
    GHOST_KIND_TASK_SESSION_ENDED,
    MCP_METHOD_NAME,
    MCP_TASK_ID,
    MCP_TASK_STATUS,
    MCP_TASK_STATUS_MESSAGE,
    TASK_COMPLETED,
    TERMINAL_TASK_STATUSES,
    TOOL_CANCEL_REASON,
    TOOLS_CALL,
)
from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.ghost_reporting import GhostEmitter
from otel_mcp_cancel.outcome import GAVE_UP_CONNECTION_LOST, classify_task, task_status, undelivered_ghost
from otel_mcp_cancel.request_state import RequestRecord
from otel_mcp_cancel.scheduler import SCHEDULER, Scheduled
from otel_mcp_cancel.task_record import TaskRecord

# Tasks followed at once, settled ones included (a late `tasks/cancel` is judged against them); oldest out.
CAPACITY = 10_000
TASK_SPAN_PREFIX = "task"
TASK_ROLE = "task"  # names the stage in a contained fault's log line


class TaskTelemetry:
    """One side's tasks, by id: the server's (with ghosts) or a client's (its view: what it was told).
    Every entry point is contained by its caller or here."""

    def __init__(
        self,
        tracer: Tracer,
        record_duration: Callable[[float, dict[str, Any]], None],
        cancelled_is_error: bool,
        ghosts: GhostEmitter | None,
        began: Callable[[], None] | None = None,
    ) -> None:
        self._tracer = tracer
        self._began = began  # told as a task begins: the process's end now has a span to end
        self._record_duration = record_duration  # a point of the side's own operation-duration histogram
        self.ghosts = ghosts  # the server reports ghosts; a client sees none
        self._cancelled_is_error = cancelled_is_error
        self._lock = threading.Lock()
        self._tasks: OrderedDict[str, TaskRecord] = OrderedDict()
        # Finished tasks nobody was told of yet, by id: the expiry each awaits (the server's side only; as many
        # as the table holds at most).
        self._expiring: dict[str, Scheduled] = {}
        self._stopped = False  # uninstrument() ran: nothing is followed or woken for any longer

    def begin(
        self,
        creation: RequestRecord,
        task_id: str,
        *,
        work_watched: bool,
        bound_to_session: bool = False,
        kept_elsewhere: bool = False,
    ) -> TaskRecord:
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
        task = TaskRecord(task_id, creation, span, work_watched, bound_to_session, kept_elsewhere)
        if self._began is not None:
            self._began()
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
            self.maybe_end(task)
        elif end is HandlerEnd.INTERRUPTED:
            self._settle(task)  # nothing will store a terminal status for work that was stopped

    def reached(self, task_id: str, status: object, *, is_tool_error: bool = False, message: object = None) -> None:
        """The task reached `status`; the first terminal status settles it (the spec allows no other after)."""
        task = self.find(task_id)
        if task is None or task.settled:
            return
        status = self.noted(task, status, message)
        if status in TERMINAL_TASK_STATUSES:
            task.status, task.is_tool_error = status, is_tool_error
            self._settle(task)

    def noted(self, task: TaskRecord, status: object, message: object = None) -> str:
        """An event for a status the task was not known to have; returns the status, bounded."""
        status = task_status(status)
        if status != task.last_status:
            task.last_status = status
            event: dict[str, Any] = {MCP_TASK_STATUS: status}
            if isinstance(message, str):
                event[MCP_TASK_STATUS_MESSAGE] = bounded(message)
            task.span.add_event(EVENT_TASK_STATUS, event)
        return status

    def gave_up(self, session: object, connection_lost: bool) -> None:
        """A client session ended: its tasks not yet settled end as what its caller got. Its own code leaving, or
        its last wait ended by its own timeout, gave up (cancelled, `tool.cancel_reason` caller | timeout); a
        connection that closed under it (the session ended by it, or its last wait did) failed. The server may
        still run them."""
        with self._lock:
            left = [task for task in self._tasks.values() if task.creation.session is session and not task.settled]
        for task in left:
            self._give_up(task, GAVE_UP_CONNECTION_LOST if connection_lost else task.last_wait or CANCEL_REASON_CALLER)

    def deadline_passed(self, task_id: str) -> None:
        """A client's own deadline for its task passed while it waited for the task's end (FastMCP's polling loop
        gave up between polls, each of them answered): it gave up then, by its timeout."""
        task = self.find(task_id)
        if task is not None and not task.settled:
            self._give_up(task, CANCEL_REASON_TIMEOUT)

    def _give_up(self, task: TaskRecord, why: str) -> None:
        """A client's task ends unsettled, as its caller got it (`why`: caller | timeout | connection lost)."""
        self.settle_pending(task)  # it was told the task completed; it never read how
        if task.settled:
            return
        task.gave_up = why
        if why != GAVE_UP_CONNECTION_LOST:
            task.span.set_attribute(TOOL_CANCEL_REASON, why)
        self._settle(task)

    def settle_pending(self, task: TaskRecord) -> None:
        """Settle a task its caller was told had completed, before anything that would settle it otherwise."""
        if task.result_pending and not task.settled:
            self.reached(task.task_id, TASK_COMPLETED)

    def _settle(self, task: TaskRecord) -> None:
        """Record the task's outcome on its span and the duration metric; end the span unless its work runs on."""
        verdict = classify_task(task.status, task.work, task.is_tool_error, gave_up=task.gave_up,
                                process_ended=task.process_ended, cancelled_is_error=self._cancelled_is_error)
        task.verdict = verdict
        task.took = time.perf_counter() - task.creation.started
        conclusion.describe(task.span, dict(verdict_attributes(TOOLS_CALL, verdict)), verdict, TASK_ROLE)
        if task.announced:
            self.name_and_measure(task)
        self.maybe_end(task)

    def name_and_measure(self, task: TaskRecord) -> None:
        """Name a settled task's span by its tool and record its duration point, once its creating request was
        concluded: only then is it known whether the server serves that tool (else both say _OTHER)."""
        if task.measured:
            return
        task.measured = True
        creation, span = task.creation, task.span
        with contained("naming a task"):
            span.update_name(span_name(TASK_SPAN_PREFIX, creation.target, target_registered=creation.tool_registered))
        verdict, took = task.verdict, task.took
        if verdict is None or took is None:  # asked only once both are known
            return
        with trace.use_span(span, record_exception=False, set_status_on_exception=False):
            conclusion.measure(self._record_duration, took, creation.metric_attributes,
                               verdict_attributes(TOOLS_CALL, verdict), TASK_ROLE)

    def session_ended(self, session: object, *, every_task: bool = False) -> None:
        """A server session ended, or its caller hung up: the results its tasks had not delivered are out of its
        caller's reach where the engine serves a task only to its own session (`every_task`: whatever the
        engine, as when the process's only caller is gone), and a completed task followed from the wire whose
        result nobody fetched is settled as completed."""
        with self._lock:
            ended = [task for task in self._tasks.values() if task.creation.in_session is session]
        for task in ended:
            self.settle_pending(task)
        for task in [task for task in ended if task.bound_to_session or every_task]:
            task.session_over = True
            self.maybe_end(task)

    def process_ending(self) -> None:
        """The server's process is exiting (its exit hooks run before the OpenTelemetry SDK's, which export
        what ends here): every task span still open ends with what is known. A task still working in this
        process was stopped by its end (failed); a finished one whose caller was not told is a ghost, its
        result gone with the process. A store that outlives the process (Docket on Redis) may still run the
        work and serve the result: such a task's span ends with no verdict or ghost guessed."""
        with self._lock:
            open_tasks = [task for task in self._tasks.values() if task.span.is_recording()]
        for task in open_tasks:
            task.process_ended = True
            with contained("ending a task as the process exits"):
                if not task.settled and not task.kept_elsewhere:
                    self._settle(task)
                else:
                    self.maybe_end(task)
            if task.span.is_recording():
                task.span.end()  # kept elsewhere, or never announced

    def stop(self) -> None:
        """uninstrument() ran, and the hooks that tell how tasks go are gone: every task span still open ends
        with what is known (no ghost guessed: its caller may yet ask, unseen), and no expiry wakes again."""
        with self._lock:
            self._stopped = True
            expiring, self._expiring = list(self._expiring.values()), {}
            open_tasks = [task for task in self._tasks.values() if not task.ended]
            for task in open_tasks:
                task.ended = True
            self._tasks.clear()
        for entry in expiring:
            SCHEDULER.cancel(entry)
        for task in open_tasks:
            with contained("ending a task's span at uninstrument()"):
                task.span.end()

    def _await_expiry(self, task: TaskRecord) -> None:
        """Its result expires at `expires_at`, whether or not a request comes: its span ends then, if still open."""
        expires_at = task.expires_at
        if expires_at is None or self._stopped:  # asked only of a task that has one
            return
        entry = SCHEDULER.call_at(expires_at, lambda: self._expired(task), "ending tasks whose results expired")
        with self._lock:
            self._expiring[task.task_id] = entry

    def _expired(self, task: TaskRecord) -> None:
        with self._lock:
            self._expiring.pop(task.task_id, None)
        task.expired = True
        self.maybe_end(task)

    def maybe_end(self, task: TaskRecord) -> None:
        """End the task's span once its verdict and its work are known, and (server) once its caller was told
        how it ended, or can no longer be: its session ended (where the engine serves a task only to its
        own session) or its result expired, or the process ends."""
        work_running = task.work_watched and task.work is None and not task.process_ended
        if not (task.settled and task.announced) or work_running or not task.span.is_recording():
            return
        lost = task.session_over or task.expired or (task.process_ended and not task.kept_elsewhere)
        delivered = task.outcome_seen or task.ghosted or lost
        waits = self.ghosts is not None and (task.bound_to_session or task.ttl is not None)
        if waits and not delivered and undelivered_ghost(task.status, task.work, False):
            if task.ttl is not None and task.expires_at is None:
                task.expires_at = time.monotonic() + task.ttl  # kept from its terminal status, as stores do
                self._await_expiry(task)
            return  # its caller may still ask
        with self._lock:
            if task.ended:
                return
            task.ended = True
        verdict = classify_task(task.status, task.work, task.is_tool_error)
        # Work done after its cancel, or a result its caller never learned of: the caller believes nothing happened.
        ghost, kind, why = verdict.ghost_handler_outcome, GHOST_KIND_TASK_CANCELLED, "the caller cancelled"
        if ghost is None and lost:
            ghost = undelivered_ghost(task.status, task.work, task.outcome_seen or task.ghosted)
            kind, why = ((GHOST_KIND_TASK_SESSION_ENDED, "the caller's session ended before it was told the task "
                          "ended") if task.session_over
                         else (GHOST_KIND_TASK_EXPIRED, "the task's result expired before its caller asked")
                         if task.expired
                         else (GHOST_KIND_TASK_PROCESS_ENDED, "the server's process ended before its caller was told "
                               "the task ended"))
        if ghost is not None and self.ghosts is not None:
            self.ghosts.task_ghost(task.creation, task.span, ghost, kind, why)
        conclusion.end(task.span, TASK_ROLE)
