"""Hooks into mcp 1.x's experimental task engine (`server.experimental.enable_tasks()`, 1.23 to 1.30).

Where a 1.x task lives:
- `Experimental.run_task(work)` (the request context's `experimental`) creates the task in the store,
  starts `work` in the session's task-support task group and returns the `CreateTaskResult` at once.
- The work's end is where its side effects are done. Then the engine stores the terminal status with
  `TaskContext.complete(result)` or `TaskContext.fail(message)`; both refuse (ValueError) a task that is
  already terminal.
- `tasks/cancel` only marks the task cancelled in the store; the work runs on to its end (a ghost), and
  then the engine's own `complete` and `fail` both refuse, and the session's task group dies (an engine
  defect the plugin records and does not paper over). The cancel itself is seen on the wire, by the
  request hooks (`task_telemetry.TaskTelemetry.observe`).
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace

from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.hooks import sdk_v1 as sdk
from otel_mcp_cancel.hooks.capabilities import TASKS_V1
from otel_mcp_cancel.hooks.observations import HookSet, arg, created_task, is_tool_error, observed
from otel_mcp_cancel.hooks.reach import Reach
from otel_mcp_cancel.hooks.wrapping import Hook
from otel_mcp_cancel.messages import message_field
from otel_mcp_cancel.request_state import NO_RECORD, current_record
from otel_mcp_cancel.server_telemetry import ServerTelemetry


class TaskHooksV1(HookSet):
    _telemetry: ServerTelemetry
    sdk = sdk

    def reaches(self) -> list[Reach]:
        return sdk.TASKS

    def hooks(self) -> list[Hook]:
        return [
            Hook("mcp.server.experimental.request_context", "Experimental.run_task", self._run_task, TASKS_V1,
                 ("work",)),
            Hook("mcp.shared.experimental.tasks.context", "TaskContext.complete", self._stored, TASKS_V1,
                 ("result",)),
            Hook("mcp.shared.experimental.tasks.context", "TaskContext.fail", self._stored, TASKS_V1),
        ]

    async def _run_task(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        record = current_record.get()()
        if not self.active or record is None:
            return await wrapped(*args, **kwargs)
        work = arg(args, kwargs, 0, "work")
        tasks = self._telemetry.tasks

        async def watched(task_context: Any) -> Any:
            """The user's work, in its task's span, its end noted. Starts after `run_task` returned."""
            current_record.set(NO_RECORD)  # this task serves no request: the creating one is answered
            task = tasks.find(task_context.task_id)
            if task is None:
                return await work(task_context)
            with trace.use_span(task.span, record_exception=False, set_status_on_exception=False):
                return await observed(lambda end: tasks.work_ended(task.task_id, end), work, (task_context,), {})

        rest = {key: value for key, value in kwargs.items() if key != "work"}
        created = await wrapped(watched, *args[1:], **rest)
        with contained("following a task's creation"):
            task = created_task(created)
            if task is not None:
                tasks.begin(record, task.task_id, work_watched=True, bound_to_session=_session_scoped(instance, kwargs))
        return created

    async def _stored(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """`complete` or `fail` stored a terminal status (raising instead when the task was terminal already)."""
        stored = await wrapped(*args, **kwargs)
        if self.active:
            with contained("following a task's terminal status"):
                task = instance.task
                result = arg(args, kwargs, 0, "result") if wrapped.__name__ == "complete" else None
                self._telemetry.tasks.reached(
                    instance.task_id,
                    message_field(task, "status"),
                    is_tool_error=result is not None and is_tool_error(result),
                    message=message_field(task, "statusMessage"),
                )
        return stored


def _session_scoped(experimental: Any, kwargs: dict[str, Any]) -> bool:
    """Whether the engine serves this task only to the session that created it: an id it generated in a
    session with a task scope (not a stateless request's fresh session, not an explicit id)."""
    features = sdk.session_experimental(sdk.experimental_session(experimental))
    return kwargs.get("task_id") is None and getattr(features, "task_session_scope", None) is not None
