"""Hooks into FastMCP's task engines, all run by Docket: `fastmcp-tasks` (FastMCP 4, the 2026-07-28 tasks
extension) and FastMCP 2.x's and 3.x's own `task=True` (2.x: a draft of spec 2025-11-25; 3.x: that spec).

Where such a task lives:
- Creating it, the engine enqueues the tool on Docket with `Docket.add(..., key=...)`; the key embeds
  the task's id (fastmcp-tasks: from `add_component_to_docket`, which also has the registered tool).
- A Docket worker runs the tool's body (each leg of it, on fastmcp-tasks). There a raised tool error
  becomes a completed `isError` result (`input_loop._error_result`), and a leg that asks the caller
  for input parks the task (`input_loop.store_outstanding`) and completes its execution. FastMCP 2.x
  and 3.x let a raised error fail the execution.
- Docket stores each execution's end: `Execution.mark_as_completed`, `mark_as_failed`,
  `mark_as_cancelled` (after its cancel interrupted the work). These are where the work ended and
  the task's status was decided, whether or not anyone polls. A completed execution's stored result
  (read back with `Execution.get_result`) says whether the tool returned an `isError` result.
- `tasks/cancel` is seen on the wire, by the request hooks.

On the client, fastmcp-tasks' `call_tool(..., timeout=N)` polls the task to its end in `_drive_to_terminal`, which
raises `TimeoutError` when the caller's deadline passes between two polls that were both answered: the wire shows
nothing, so the drive is where the caller gave up.
"""

from __future__ import annotations

import importlib
import threading
from collections import OrderedDict
from datetime import timedelta
from typing import Any

from opentelemetry import trace

from otel_mcp_cancel.answers import HandlerEnd
from otel_mcp_cancel.client_telemetry import ClientTelemetry
from otel_mcp_cancel.conventions import TASK_CANCELLED, TASK_COMPLETED, TASK_FAILED, TASK_INPUT_REQUIRED, TOOLS_CALL
from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.hooks.observations import HookSet, arg
from otel_mcp_cancel.hooks.wrapping import Hook
from otel_mcp_cancel.messages import is_tool_error
from otel_mcp_cancel.package import TASKS_EXTENSION
from otel_mcp_cancel.request_state import current_record
from otel_mcp_cancel.server_telemetry import ServerTelemetry

TOOL_ERROR, PARKED = "tool_error", "parked"
IN_PROCESS_DOCKET = "memory://"
_ENDS = {
    "mark_as_completed": (TASK_COMPLETED, HandlerEnd.RETURNED),
    "mark_as_failed": (TASK_FAILED, HandlerEnd.RAISED),
    "mark_as_cancelled": (TASK_CANCELLED, HandlerEnd.INTERRUPTED),
}
# Legs whose body has ended but whose execution Docket has not marked yet; a worker that dies in between
# leaves its note here, so the table is bounded.
CAPACITY = 10_000
# The result is stored before its execution is marked completed: reading it back never waits in practice.
_RESULT_READ_TIMEOUT = timedelta(seconds=1)

TASK_WORK = "the spans and outcomes of FastMCP's tasks (their work on Docket)"


class FastMCPTaskHooks(HookSet):
    _telemetry: ServerTelemetry

    def __init__(self, telemetry: ServerTelemetry, engine: str, *, bound_to_session: bool = False) -> None:
        super().__init__(telemetry)
        self._engine = engine
        self._bound_to_session = bound_to_session  # FastMCP 2.x keys a task by its session
        self._lock = threading.Lock()
        self._leg_ends: OrderedDict[str, str] = OrderedDict()  # task id -> TOOL_ERROR or PARKED

    def hooks(self) -> list[Hook]:
        hooks = [
            Hook("docket.docket", "Docket.add", self._enqueue, TASK_WORK),
            *(Hook("docket.execution", f"Execution.{name}", self._marked, TASK_WORK) for name in _ENDS),
        ]
        if self._engine == TASKS_EXTENSION:
            hooks += [
                Hook("fastmcp_tasks.creation", "add_component_to_docket", self._enqueue_component, TASK_WORK,
                     ("component",)),
                Hook("fastmcp_tasks.input_loop", "_error_result", self._tool_error,
                     "tasks whose tool answered isError (failed rather than completed)"),
                Hook("fastmcp_tasks.input_loop", "store_outstanding", self._parked,
                     "tasks waiting on their caller's input (input_required)", ("docket", "task_scope", "task_id")),
            ]
        return hooks

    def _enqueue(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """The task begins before its work can: a fast worker may finish it before the creation is answered."""
        record = current_record.get()()
        if self.active and record is not None and record.method == TOOLS_CALL:
            with contained("following a task's creation"):
                task_id = self._task_id(args[2] if len(args) > 2 else kwargs.get("key"))
                if task_id is not None:
                    # Docket keeps its queue and results in this process only on its in-memory backend.
                    kept_elsewhere = not str(getattr(instance, "url", "")).startswith(IN_PROCESS_DOCKET)
                    self._telemetry.tasks.begin(record, task_id, work_watched=True,
                                                bound_to_session=self._bound_to_session, kept_elsewhere=kept_elsewhere)
        return wrapped(*args, **kwargs)

    async def _enqueue_component(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """fastmcp-tasks: the component is the registered tool FastMCP runs, with its annotations (a ghost's risk)."""
        record = current_record.get()()
        if self.active and record is not None and record.method == TOOLS_CALL:
            with contained("reading a task's tool"):
                component = arg(args, kwargs, 0, "component")
                record.tool_registered = True
                record.registered_annotations = getattr(component, "annotations", None)
        return await wrapped(*args, **kwargs)

    def _tool_error(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if self.active:
            with contained("observing a task's tool error"):
                self._note_leg(TOOL_ERROR)
        return wrapped(*args, **kwargs)

    async def _parked(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        stored = await wrapped(*args, **kwargs)
        if self.active:
            with contained("observing a task waiting for input"):
                self._note_leg(PARKED, arg(args, kwargs, 2, "task_id"))
        return stored

    async def _marked(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        marked = await wrapped(*args, **kwargs)
        if self.active:
            with contained("following a task's end"):
                task_id = self._task_id(instance.key)
                if task_id is not None:
                    with self._lock:
                        leg_end = self._leg_ends.pop(task_id, None)
                    if leg_end is None and wrapped.__name__ == "mark_as_completed":
                        leg_end = await self._stored_result_end(instance, arg(args, kwargs, 0, "result_key"))
                    self._ended(task_id, wrapped.__name__, leg_end)
        return marked

    async def _stored_result_end(self, execution: Any, result_key: object) -> str | None:
        """TOOL_ERROR when the result a completed execution stored has isError: a tool that returned one
        (a raised error is seen where the engine turns it into a result)."""
        if result_key is None:  # the tool returned nothing
            return None
        with contained("reading a task's stored result"):
            result = await execution.get_result(timeout=_RESULT_READ_TIMEOUT)
            if is_tool_error(result):
                return TOOL_ERROR
        return None

    def _ended(self, task_id: str, mark: str, leg_end: str | None) -> None:
        tasks = self._telemetry.tasks
        tasks.link_work(task_id, trace.get_current_span().get_span_context())  # Docket marks in its worker span
        if leg_end == PARKED and mark == "mark_as_completed":
            tasks.reached(task_id, TASK_INPUT_REQUIRED)  # the next leg runs once the caller answers
            return
        status, end = _ENDS[mark]
        tool_error = leg_end == TOOL_ERROR
        if tool_error:
            end = HandlerEnd.RETURNED_TOOL_ERROR
        tasks.reached(task_id, status, is_tool_error=tool_error)  # first: an interrupted end settles nothing
        tasks.work_ended(task_id, end)

    def _note_leg(self, leg_end: str, task_id: object = None) -> None:
        if task_id is None:
            from fastmcp_tasks.context import get_task_context

            context = get_task_context()
            task_id = None if context is None else context.task_id
        if not isinstance(task_id, str):
            return
        with self._lock:
            self._leg_ends[task_id] = leg_end
            if len(self._leg_ends) > CAPACITY:
                self._leg_ends.popitem(last=False)

    def _task_id(self, task_key: object) -> str | None:
        """The task id the engine's Docket key embeds; None for any other key (Docket runs other work too)."""
        if not isinstance(task_key, str):
            return None
        keys = importlib.import_module(
            "fastmcp_tasks.keys" if self._engine == TASKS_EXTENSION else "fastmcp.server.tasks.keys"
        )
        try:
            return keys.parse_task_key(task_key)["client_task_id"]
        except (ValueError, KeyError):
            return None


class FastMCPTaskClientHooks(HookSet):
    """fastmcp-tasks' client: the caller's own deadline for a task it polls."""

    _telemetry: ClientTelemetry

    def hooks(self) -> list[Hook]:
        return [Hook("fastmcp_tasks.client", "_drive_to_terminal", self._drive,
                     "a client's own deadline on a task it polls (tool.cancel_reason=timeout)")]

    async def _drive(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        try:
            return await wrapped(*args, **kwargs)
        except TimeoutError:
            if self.active:
                with contained("following a task's deadline"):
                    self._telemetry.tasks.deadline_passed(arg(args, kwargs, 1, "task_id"))
            raise
