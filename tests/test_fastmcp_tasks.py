"""FastMCP's task engines, both run by Docket: fastmcp-tasks (FastMCP 4, the 2026-07-28 tasks extension) and
FastMCP 2.x's and 3.x's own `task=True` (2.x: a draft of spec 2025-11-25). A task-augmented tools/call's outcome is its
task's terminal status, whether or not anyone polls it.

A real FastMCP server with Docket's in-process `memory://` backend and its worker, and a real
`fastmcp.Client` (its task handle's `status`, `result` and `cancel`). The tools wait on events the test
sets; the test waits for the task span to end, never for a guessed time.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from tests.frameworks import FASTMCP_MAJOR, FASTMCP_VERSION

ON_TASKS_EXTENSION = importlib.util.find_spec("fastmcp_tasks") is not None
ON_OWN_ENGINE = FASTMCP_MAJOR in (2, 3) and importlib.util.find_spec("docket") is not None  # FastMCP's own
if not (ON_TASKS_EXTENSION or ON_OWN_ENGINE):
    pytest.skip("neither fastmcp-tasks nor FastMCP 2.x/3.x with Docket is installed", allow_module_level=True)

from fastmcp import Client, FastMCP  # noqa: E402

if ON_TASKS_EXTENSION:
    import fastmcp_tasks  # noqa: F401  (its import registers the client's half: a Client made after it asks for tasks)

try:
    from mcp_types import CallToolResult, TextContent
except ImportError:  # mcp 1.x
    from mcp.types import CallToolResult, TextContent
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from examples.otlp_sink import OtlpSink, exporter_environment  # noqa: E402
from tests.conftest import Captured  # noqa: E402
from tests.subprocess_servers import HttpServer, instrumented_script  # noqa: E402
from tests.support import assert_ghost_line, until  # noqa: E402
from tests.task_spans import (  # noqa: E402
    GHOST_EVENT,
    STATUS_EVENT,
    assert_polled_on_a_closed_connection,
    events,
    outcome_points,
    settled,
    spans_named,
    task_ended,
    task_spans,
)

pytestmark = pytest.mark.anyio

SCOPE = "otel_mcp_cancel"
TASK_SERVER = Path(__file__).resolve().parent / "task_server.py"

# What each engine makes of a tool that raises: fastmcp-tasks a completed task with an isError result
# (as a direct call answers), FastMCP 2.x and 3.x a failed one.
RAISED = ("completed", "the tool's result has isError: true") if ON_TASKS_EXTENSION else (
    "failed", "the task's status is failed")


@pytest.fixture(autouse=True)
def own_docket(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Docket queue of this test's own: servers in one process share Docket's in-memory backend, and a
    previous test's worker must not pick up this test's task (FastMCP 2.x and 3.x name their queue from settings)."""
    if ON_OWN_ENGINE:
        import fastmcp

        monkeypatch.setattr(fastmcp.settings.docket, "name", f"tasks-{uuid.uuid4().hex}")


class TaskServer:
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.side_effects: list[str] = []
        self.server = FastMCP("tasks")
        if ON_TASKS_EXTENSION:
            from fastmcp_tasks import TasksExtension

            self.server.add_extension(TasksExtension(url="memory://", name=f"tasks-{uuid.uuid4().hex}"))

        @self.server.tool(task=True, annotations={"destructiveHint": True})
        async def commit(path: str) -> str:
            self.started.set()
            await self.release.wait()
            self.side_effects.append(path)
            return f"committed {path}"

        @self.server.tool(task=True, annotations={"idempotentHint": True})
        async def crash(path: str) -> str:
            self.started.set()
            await self.release.wait()
            raise RuntimeError("disk full")

        @self.server.tool(task=True, annotations={"readOnlyHint": True})
        async def refuse(path: str) -> Any:
            self.started.set()
            await self.release.wait()
            return CallToolResult(content=[TextContent(type="text", text=f"{path} has no title")], isError=True)


async def call_tool_task(client: Client, tool: str, arguments: dict[str, Any]) -> Any:
    """The engine's task handle for a task-augmented call: `task_id`, `status()`, `result()`, `cancel()`."""
    if ON_TASKS_EXTENSION:
        from fastmcp_tasks import call_tool_task as extension_call_tool_task

        return await extension_call_tool_task(client, tool, arguments)
    return await client.call_tool(tool, arguments, task=True)


async def told(task: Any, status: str) -> None:
    """The caller asks the server, and is told its task finished (the extension inlines the result). FastMCP
    2.x's and 3.x's `status()` may answer from the status notification its server sent unasked, with no `tasks/get`:
    the server cannot know its caller looked, so the test asks the server itself."""
    polled = await (task.status() if ON_TASKS_EXTENSION else task._client.get_task_status(task.task_id))
    assert polled.status == status
    assert getattr(polled, "result", None) is not None or not ON_TASKS_EXTENSION or status != "completed"


def one(captured: Captured, name: str, kind: SpanKind) -> Any:
    (span,) = [span for span in spans_named(captured, name) if span.kind is kind]
    return span


async def test_a_task_is_settled_by_its_engine_before_anyone_asks_in_one_trace_with_its_creation(captured) -> None:
    app = TaskServer()
    async with Client(app.server) as client:
        task = await call_tool_task(client, "commit", {"path": "a.md"})
        app.release.set()
        await settled(captured, "ok", "completed")  # by the engine, before anyone asked
        await told(task, "completed")
        span = await task_ended(captured, "commit")

    creation = one(captured, "tools/call commit", SpanKind.SERVER)
    assert creation.attributes["mcp.task.id"] == task.task_id
    assert creation.attributes["mcp.task.status"] == "working" and "tool.outcome" not in creation.attributes
    assert span.context.trace_id == creation.context.trace_id and span.parent.span_id == creation.context.span_id
    assert dict(span.attributes) == {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "commit",
        "mcp.task.id": task.task_id,
        "tool.outcome": "ok",
        "mcp.task.status": "completed",
    }
    assert events(span) == [(STATUS_EVENT, {"mcp.task.status": "working"}),
                            (STATUS_EVENT, {"mcp.task.status": "completed"})]
    (worker,) = [s for s in captured.spans.get_finished_spans() if s.kind is SpanKind.CONSUMER]  # Docket's
    assert [link.context.span_id for link in span.links] == [worker.context.span_id]
    poll = one(captured, "tasks/get", SpanKind.SERVER)
    assert poll.attributes["mcp.task.id"] == task.task_id
    assert [link.context.span_id for link in poll.links] == [span.context.span_id]
    assert outcome_points(captured) == {
        (("mcp.task.status", creation.attributes["mcp.task.status"]),): 1,
        (("tool.outcome", span.attributes["tool.outcome"]), ("mcp.task.status", span.attributes["mcp.task.status"])): 1,
    }
    # The client's view ends with what it was told: its one poll said completed.
    viewed = await task_ended(captured, "commit", SpanKind.CLIENT)
    assert viewed.parent.span_id == one(captured, "tools/call commit", SpanKind.CLIENT).context.span_id
    assert dict(viewed.attributes) == dict(span.attributes)
    assert outcome_points(captured, "mcp.client.operation.duration") == {
        (("mcp.task.status", "working"),): 1, (("tool.outcome", "ok"), ("mcp.task.status", "completed")): 1}


async def test_a_task_whose_tool_raised_is_failed(captured) -> None:
    app = TaskServer()
    async with Client(app.server) as client:
        task = await call_tool_task(client, "crash", {"path": "a.md"})
        app.release.set()
        await settled(captured, "failed", RAISED[0])
        await told(task, RAISED[0])
        span = await task_ended(captured, "crash")
    status, description = RAISED
    assert {key: span.attributes.get(key) for key in ("tool.outcome", "error.type", "mcp.task.status")} == {
        "tool.outcome": "failed", "error.type": "tool_error", "mcp.task.status": status}
    assert (span.status.status_code, span.status.description) == (StatusCode.ERROR, description)


async def test_a_task_whose_tool_returned_is_error_is_failed_on_both_ends(captured) -> None:
    app = TaskServer()
    async with Client(app.server) as client:
        task = await call_tool_task(client, "refuse", {"path": "a.md"})
        app.release.set()
        await settled(captured, "failed", "completed")
        await told(task, "completed")
        if not ON_TASKS_EXTENSION:
            await task.result()  # the draft wire: only the result says isError
        served = await task_ended(captured, "refuse")
        viewed = await task_ended(captured, "refuse", SpanKind.CLIENT)
    failed = {"tool.outcome": "failed", "error.type": "tool_error", "mcp.task.status": "completed"}
    # FastMCP 2.x's and 3.x's engines serve a returned CallToolResult as the text of an ok result: its client
    # is told ok.
    told_ok = {"tool.outcome": "ok", "error.type": None, "mcp.task.status": "completed"}
    for span, expected in ((served, failed), (viewed, failed if ON_TASKS_EXTENSION else told_ok)):
        assert {key: span.attributes.get(key) for key in expected} == expected


async def test_a_task_cancelled_while_working_is_cancelled_and_its_work_stopped(captured, plugin_log) -> None:
    app = TaskServer()
    async with Client(app.server) as client:
        task = await call_tool_task(client, "commit", {"path": "a.md"})
        await app.started.wait()
        await task.cancel()
        span = await task_ended(captured, "commit")
        app.release.set()
    assert app.side_effects == []  # Docket's cancel interrupted the work
    assert (span.attributes["tool.outcome"], span.attributes["mcp.task.status"]) == ("cancelled", "cancelled")
    assert "tool.handler_outcome" not in span.attributes
    assert [link.context.span_id for link in one(captured, "tasks/cancel", SpanKind.SERVER).links] == [
        span.context.span_id]
    assert outcome_points(captured)[(("tool.outcome", "cancelled"), ("mcp.task.status", "cancelled"))] == 1
    assert captured.points("tool.ghost_responses") == [] and plugin_log() == []
    assert (await task_ended(captured, "commit", SpanKind.CLIENT)).attributes["tool.outcome"] == "cancelled"


async def test_a_cancel_after_the_task_finished_unpolled_is_a_ghost(captured, plugin_log) -> None:
    app = TaskServer()
    async with Client(app.server) as client:
        task = await call_tool_task(client, "commit", {"path": "a.md"})
        app.release.set()
        await settled(captured, "ok", "completed")  # the server knows; the caller was not told
        await task.cancel()  # acknowledged: the caller believes it stopped the commit that happened
        # (fastmcp-tasks: an empty acknowledgement; FastMCP 2.x and 3.x: "cancelled", for a task that completed)
        await until(lambda: spans_named(captured, "tasks/cancel") != [])
    cancel, span = one(captured, "tasks/cancel", SpanKind.SERVER), await task_ended(captured, "commit")
    assert span.attributes["tool.outcome"] == "ok" and app.side_effects == ["a.md"]
    assert {key: cancel.attributes.get(key) for key in ("mcp.task.id", "tool.handler_outcome", "tool.ghost_risk")} == {
        "mcp.task.id": task.task_id, "tool.handler_outcome": "ok", "tool.ghost_risk": "unsafe"}
    assert [name for name, _ in events(cancel)] == [GHOST_EVENT]
    (ghosts,) = captured.points("tool.ghost_responses")
    assert (ghosts.attributes["gen_ai.tool.name"], ghosts.attributes["tool.ghost_risk"], ghosts.value) == (
        "commit", "unsafe", 1)
    (line,) = plugin_log()
    (created,) = [s for s in captured.request_spans() if s.name == "tools/call commit" and s.kind is SpanKind.SERVER]
    assert_ghost_line(line, "commit", int(created.attributes["jsonrpc.request.id"]))
    assert task.task_id in line.getMessage()
    # The client never saw the commit finish. FastMCP 2.x and 3.x told it the task was cancelled; the extension's
    # empty acknowledgement tells no status, and the caller left without asking: it gave up.
    viewed = await task_ended(captured, "commit", SpanKind.CLIENT)
    told_status = None if ON_TASKS_EXTENSION else "cancelled"
    reason = "caller" if ON_TASKS_EXTENSION else None
    assert {key: viewed.attributes.get(key) for key in ("tool.outcome", "mcp.task.status", "tool.cancel_reason")} == {
        "tool.outcome": "cancelled", "mcp.task.status": told_status, "tool.cancel_reason": reason}


@pytest.mark.skipif(not ON_TASKS_EXTENSION, reason="the 2026-07-28 extension's cancel is best-effort")
async def test_an_acknowledged_cancel_is_no_verdict_the_status_told_next_is(captured) -> None:
    app = TaskServer()
    async with Client(app.server) as client:
        task = await call_tool_task(client, "commit", {"path": "a.md"})
        app.release.set()
        await settled(captured, "ok", "completed")
        await task.cancel()  # an empty acknowledgement
        await told(task, "completed")  # the work had completed: the result is inline
        viewed = await task_ended(captured, "commit", SpanKind.CLIENT)
    assert {key: viewed.attributes.get(key) for key in ("tool.outcome", "mcp.task.status", "tool.cancel_reason")} == {
        "tool.outcome": "ok", "mcp.task.status": "completed", "tool.cancel_reason": None}


async def test_a_cancel_after_the_result_was_polled_is_no_ghost(captured, plugin_log) -> None:
    app = TaskServer()
    async with Client(app.server) as client:
        task = await call_tool_task(client, "commit", {"path": "a.md"})
        app.release.set()
        await settled(captured, "ok", "completed")
        await told(task, "completed")
        await task.cancel()
        await until(lambda: spans_named(captured, "tasks/cancel") != [])
    assert "tool.handler_outcome" not in one(captured, "tasks/cancel", SpanKind.SERVER).attributes
    assert captured.points("tool.ghost_responses") == [] and plugin_log() == []
    assert (await task_ended(captured, "commit", SpanKind.CLIENT)).attributes["tool.outcome"] == "ok"


async def caller_view(app: TaskServer, tool: str) -> tuple[Any, ...]:
    """What a caller sees of a task that runs to its end: its first and last status and its inline result."""
    async with Client(app.server) as client:
        task = await call_tool_task(client, tool, {"path": "a.md"})
        first = (await task.status()).status
        app.release.set()
        final = await task.status()
        while final.status == "working":  # polling, as a caller does: each answer is checked, none assumed
            await asyncio.sleep(0.005)
            final = await task.status()
        return first, final.status, getattr(final, "result", None)  # inline on the extension only


@pytest.mark.parametrize("tool", ["commit", "crash"])
async def test_the_caller_sees_the_same_with_and_without_the_plugin(monkeypatch, tool) -> None:
    from tests.conftest import instrumented

    plain = await caller_view(TaskServer(), tool)
    with instrumented(monkeypatch):
        traced = await caller_view(TaskServer(), tool)
    assert traced == plain


async def test_a_caller_that_leaves_before_the_task_ends_gave_up(captured) -> None:
    app = TaskServer()
    async with Client(app.server) as client:
        task = await call_tool_task(client, "commit", {"path": "a.md"})
        await app.started.wait()
    viewed = await task_ended(captured, "commit", SpanKind.CLIENT)
    assert dict(viewed.attributes) == {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "commit",
        "mcp.task.id": task.task_id,
        "tool.outcome": "cancelled",
        "tool.cancel_reason": "caller",
    }
    assert outcome_points(captured, "mcp.client.operation.duration")[(("tool.outcome", "cancelled"),)] == 1


@pytest.mark.skipif(
    ON_OWN_ENGINE and FASTMCP_VERSION == "2.14.0",
    reason="FastMCP 2.14.0 gives a second in-process session no Docket ('Background tasks require a running "
    "FastMCP server context'); 2.14.7 does",
)
async def test_only_the_leaving_sessions_tasks_gave_up_and_the_server_runs_them_on(captured) -> None:
    app = TaskServer()
    async with Client(app.server) as keeper:  # its session keeps the server, and Docket's worker, running
        crash = await call_tool_task(keeper, "crash", {"path": "b.md"})
        async with Client(app.server) as client:
            await call_tool_task(client, "commit", {"path": "a.md"})
            await app.started.wait()
        viewed = await task_ended(captured, "commit", SpanKind.CLIENT)
        assert task_spans(captured, "crash", SpanKind.CLIENT) == []  # another session's task is its own
        app.release.set()  # the server's tasks run on: nobody cancelled them
        await settled(captured, "ok", "completed")
        await settled(captured, "failed", RAISED[0])
    viewed_crash = await task_ended(captured, "crash", SpanKind.CLIENT)  # never polled: gave up too
    assert crash.task_id == viewed_crash.attributes["mcp.task.id"]
    for span in (viewed, viewed_crash):
        assert {key: span.attributes.get(key) for key in ("tool.outcome", "tool.cancel_reason", "mcp.task.status")} == {
            "tool.outcome": "cancelled", "tool.cancel_reason": "caller", "mcp.task.status": None}
    assert outcome_points(captured, "mcp.client.operation.duration")[(("tool.outcome", "cancelled"),)] == 2


@pytest.mark.skipif(ON_TASKS_EXTENSION, reason="fastmcp-tasks serves tasks on the 2026-07-28 protocol only: "
                    "the next test is its own")
async def test_a_stdio_server_left_with_a_finished_task_unfetched_exports_its_ghost_before_it_is_stopped(
    sink: OtlpSink, tmp_path: Path
) -> None:
    """A caller over stdio leaves as the SDK's stdio client does: it closes the server's stdin, gives it 2 s to
    exit, then terminates it (FastMCP 2.x does not end its session by itself; the result store is in the
    process, so nobody can fetch the result after that). The task's span, its outcome and its ghost are
    exported before then, with the SDK's default export delays (5 s for spans, a minute for metrics): the
    plugin flushes as the caller leaves. The caller is a raw peer on the process's pipes, reading every
    line the server writes until it is stopped (the SDK's client stops reading first, and crashes on a
    notification written after that)."""
    environment = {**exporter_environment(sink.endpoint), "OTEL_BSP_SCHEDULE_DELAY": "5000",
                   "OTEL_METRIC_EXPORT_INTERVAL": "60000"}
    process = await anyio.open_process(instrumented_script(TASK_SERVER, str(tmp_path)), env=environment,
                                       stderr=subprocess.DEVNULL)
    received: dict[Any, dict[str, Any]] = {}
    statuses: dict[str, str] = {}

    async def read_lines() -> None:
        lines = BufferedByteReceiveStream(process.stdout)
        with contextlib.suppress(anyio.EndOfStream, anyio.IncompleteRead):
            while True:
                message = json.loads(await lines.receive_until(b"\n", 1 << 20))
                if "id" in message:
                    received[message["id"]] = message
                elif message.get("method") == "notifications/tasks/status":
                    statuses[message["params"]["taskId"]] = message["params"]["status"]

    async def send(message: dict[str, Any]) -> None:
        await process.stdin.send(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

    async with process, anyio.create_task_group() as reading:
        reading.start_soon(read_lines)
        with anyio.fail_after(30):
            await send({"id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {"experimental": {"tasks": {}}},
                "clientInfo": {"name": "raw", "version": "0"}}})
            await until(lambda: 1 in received, seconds=30)
            await send({"method": "notifications/initialized"})
            await send({"id": 2, "method": "tools/call", "params": {
                "name": "commit", "arguments": {"path": "a.md"}, "task": {"ttl": 60_000}}})
            await until(lambda: 2 in received, seconds=30)
            created = received[2]["result"]  # 3.x: spec 2025-11-25's `task`; 2.x: a stub result's `_meta`
            task_id = (created.get("task") or created["_meta"]["modelcontextprotocol.io/task"])["taskId"]
            # Its server says, unasked, that the task completed: its caller was never told (no `tasks/get`).
            await until(lambda: statuses.get(task_id) == "completed", seconds=30)
        assert (tmp_path / "a.md").exists()
        await process.stdin.aclose()
        with anyio.move_on_after(2):  # the SDK's PROCESS_TERMINATION_TIMEOUT
            await process.wait()
        if process.returncode is None:
            process.terminate()
            with anyio.move_on_after(10):
                await process.wait()
        if process.returncode is None:
            process.kill()  # as the SDK's client does to a server that outlives its terminate()
        await process.wait()
    (span,) = [span for span in sink.spans if span.scope == SCOPE and span.name == "task commit"]
    assert {key: span.attributes.get(key) for key in ("mcp.task.id", "tool.outcome", "tool.handler_outcome",
                                                        "tool.ghost_risk")} == {
        "mcp.task.id": task_id, "tool.outcome": "ok", "tool.handler_outcome": "ok", "tool.ghost_risk": "unsafe"}
    (ghosts,) = sink.latest_points("tool.ghost_responses")
    assert (ghosts.attributes["gen_ai.tool.name"], ghosts.value) == ("commit", 1)


@pytest.mark.skipif(not ON_TASKS_EXTENSION, reason="the previous test is FastMCP 2.x's and 3.x's own")
async def test_a_stdio_server_on_fastmcp_tasks_left_with_a_finished_task_unfetched_exports_its_ghost(
    sink: OtlpSink, tmp_path: Path
) -> None:
    """As the previous test, on fastmcp-tasks, whose tasks outlive their session and keep their result for their
    ttl: over stdio the caller that leaves was the process's only one. Its caller is FastMCP's client over the
    SDK's stdio client (on the 2026-07-28 protocol no status is sent unasked: it never learns the task ended),
    which closes the server's stdin, gives it 2 s, then terminates it."""
    from fastmcp.client.transports import StdioTransport

    environment = {**os.environ, **exporter_environment(sink.endpoint), "OTEL_BSP_SCHEDULE_DELAY": "5000",
                   "OTEL_METRIC_EXPORT_INTERVAL": "60000"}
    command = instrumented_script(TASK_SERVER, str(tmp_path))
    transport = StdioTransport(command[0], command[1:], env=environment, keep_alive=False)
    async with Client(transport) as client:
        task = await call_tool_task(client, "commit", {"path": "a.md"})
        await until(lambda: (tmp_path / "a.md").exists(), seconds=30)
    await until(lambda: [span for span in sink.spans if span.name == "task commit"] != [], seconds=10)
    (span,) = [span for span in sink.spans if span.name == "task commit"]
    assert {key: span.attributes.get(key) for key in ("mcp.task.id", "tool.outcome", "tool.handler_outcome",
                                                        "tool.ghost_risk")} == {
        "mcp.task.id": task.task_id, "tool.outcome": "ok", "tool.handler_outcome": "ok", "tool.ghost_risk": "unsafe"}
    await until(lambda: sink.latest_points("tool.ghost_responses") != [], seconds=10)
    (ghosts,) = sink.latest_points("tool.ghost_responses")
    assert (ghosts.attributes["gen_ai.tool.name"], ghosts.value) == ("commit", 1)


async def stop_with_a_finished_task_unfetched(sink: OtlpSink, tmp_path: Path, **environment: str) -> tuple[Any, Any]:
    """The task server over HTTP, exporting to `sink` with the SDK's default span export delay; a caller
    creates a `commit` task and leaves once the server settled it (its outcome point), never told; then the
    server is stopped as a supervisor stops it for a restart (SIGTERM: uvicorn's graceful shutdown, then
    the interpreter's exit). Returns the task's handle and its exported span."""
    environment = {"OTEL_BSP_SCHEDULE_DELAY": "5000", "OTEL_METRIC_EXPORT_INTERVAL": "100",
                   "OTEL_LOGS_EXPORTER": "otlp_proto_http", "OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED": "true",
                   **environment}
    server = HttpServer(sink.endpoint, tmp_path, "http", script=TASK_SERVER, **environment)  # it exports to sink
    try:
        async with Client(f"http://127.0.0.1:{server.port}/mcp") as client:
            task = await call_tool_task(client, "commit", {"path": "a.md"})
            await until(lambda: [point for point in sink.latest_points("mcp.server.operation.duration")
                                 if point.attributes.get("tool.outcome") == "ok"] != [], seconds=30)
    finally:
        server.stop(signal.SIGTERM)
    assert server.process.returncode == 128 + signal.SIGTERM and (tmp_path / "a.md").exists()
    (span,) = [span for span in sink.spans if span.name == "task commit"]
    assert {key: span.attributes.get(key) for key in ("mcp.task.id", "tool.outcome", "mcp.task.status")} == {
        "mcp.task.id": task.task_id, "tool.outcome": "ok", "mcp.task.status": "completed"}
    return task, span


async def test_a_server_stopped_with_a_finished_task_unfetched_exports_its_span_and_ghost(
    sink: OtlpSink, tmp_path: Path
) -> None:
    """Its result store was in the process: nobody will fetch the result, a ghost, exported as the process
    exits. FastMCP 2.x's tasks belong to their session: the caller's leaving already made the ghost."""
    task, span = await stop_with_a_finished_task_unfetched(sink, tmp_path)
    assert {key: span.attributes.get(key) for key in ("tool.handler_outcome", "tool.ghost_risk")} == {
        "tool.handler_outcome": "ok", "tool.ghost_risk": "unsafe"}
    assert [name for name, _ in span.events][-1] == GHOST_EVENT
    (ghosts,) = sink.latest_points("tool.ghost_responses")
    assert (ghosts.attributes["gen_ai.tool.name"], ghosts.value) == ("commit", 1)
    (warning,) = [log for log in sink.logs if log.severity_text == "WARN" and task.task_id in str(log.body)]
    why = "session ended" if ON_OWN_ENGINE and FASTMCP_MAJOR == 2 else "process ended"
    assert why in str(warning.body) and warning.span_id == span.span_id


@pytest.mark.skipif(not ON_TASKS_EXTENSION, reason="Docket's URL is set the same way for FastMCP's own engines")
async def test_a_server_stopped_with_its_tasks_kept_in_redis_reports_no_ghost(sink: OtlpSink, tmp_path: Path) -> None:
    """Docket on Redis keeps the result past the process (another replica, or this one restarted, serves it
    to a caller who asks within its ttl): the span is exported with its outcome as the process exits, and
    no ghost is guessed."""
    from tests.redis_server import running_redis

    with running_redis(tmp_path) as url:
        _, span = await stop_with_a_finished_task_unfetched(sink, tmp_path, TASK_SERVER_DOCKET_URL=url)
    assert "tool.handler_outcome" not in span.attributes and GHOST_EVENT not in [name for name, _ in span.events]
    assert sink.latest_points("tool.ghost_responses") == []
    assert [log for log in sink.logs if log.severity_text == "WARN"] == []


async def test_a_task_still_working_as_the_process_exits_is_failed_by_the_exit(captured, plugin_log) -> None:
    """The exit hook the plugin registers as a server serves (run here as the interpreter would run it): the
    task's span ends failed, stopped by the process's end, with no ghost; the work's later end changes nothing."""
    from otel_mcp_cancel import McpCancelInstrumentor

    app = TaskServer()
    async with Client(app.server) as client:
        await call_tool_task(client, "commit", {"path": "a.md"})
        await app.started.wait()
        exit_hook = McpCancelInstrumentor()._telemetry["server"]._exit_hook
        assert exit_hook is not None
        exit_hook()
        span = await task_ended(captured, "commit")
        app.release.set()
        await until(lambda: app.side_effects == ["a.md"])
    assert {key: span.attributes.get(key) for key in ("tool.outcome", "error.type", "mcp.task.status",
                                                        "tool.handler_outcome")} == {
        "tool.outcome": "failed", "error.type": "_OTHER", "mcp.task.status": None, "tool.handler_outcome": None}
    assert (span.status.status_code, span.status.description) == (
        StatusCode.ERROR, "the server's process ended while the task was working")
    assert outcome_points(captured)[(("tool.outcome", "failed"), ("error.type", "_OTHER"))] == 1
    assert captured.points("tool.ghost_responses") == [] and plugin_log() == []


@pytest.mark.skipif(ON_TASKS_EXTENSION, reason="FastMCP on mcp 1.x: its client's poll cannot be sent once the "
                    "connection closed (mcp 2.x's client answers it with CONNECTION_CLOSED itself)")
async def test_a_client_whose_server_was_killed_mid_task_saw_its_task_fail(captured, tmp_path: Path) -> None:
    """FastMCP's client over stdio, its server's process killed mid-task (no goodbye): the next poll cannot be
    sent, its connection closed. The poll and the task failed on a closed connection: nobody gave up."""
    from fastmcp.client.transports import StdioTransport

    transport = StdioTransport(sys.executable, [str(TASK_SERVER), str(tmp_path)], keep_alive=False)
    started = tmp_path / "started"
    async with Client(transport) as client:
        task = await call_tool_task(client, "hold", {"path": started.name})
        await until(lambda: started.exists() and started.read_text() != "", seconds=30)
        os.kill(int(started.read_text()), signal.SIGKILL)
        await until(lambda: client.session._write_stream._closed, seconds=30)  # the SDK saw its connection close
        with pytest.raises(anyio.ClosedResourceError):
            await client.get_task_status(task.task_id)
    await assert_polled_on_a_closed_connection(captured, "hold")


@pytest.mark.skipif(not ON_TASKS_EXTENSION, reason="fastmcp-tasks' client polls a task to its end within the call's "
                    "timeout")
async def test_a_callers_own_deadline_passing_while_its_task_works_gives_up_then_by_timeout(captured) -> None:
    """`call_tool(..., timeout=0.5)` on a tool that runs as a task: FastMCP polls the task, each poll answered
    `working`, and raises TimeoutError once the deadline passes. The caller gave up, by its own timeout, then."""
    app = TaskServer()
    async with Client(app.server) as client:
        with pytest.raises(TimeoutError):
            await client.call_tool("commit", {"path": "a.md"}, timeout=0.5)
        viewed = await task_ended(captured, "commit", SpanKind.CLIENT)  # the session is still open
        app.release.set()
    assert {key: viewed.attributes.get(key) for key in ("tool.outcome", "tool.cancel_reason", "error.type")} == {
        "tool.outcome": "cancelled", "tool.cancel_reason": "timeout", "error.type": "timeout"}
    assert viewed.status.status_code is StatusCode.UNSET
    polls = [span for span in spans_named(captured, "tasks/get") if span.kind is SpanKind.CLIENT]
    assert polls != [] and {span.attributes.get("error.type") for span in polls} == {None}  # each one answered


async def test_the_dashboards_tasks_panel_on_a_real_prometheus(sink: OtlpSink, tmp_path: Path) -> None:
    """The shipped dashboard's tasks panel, on a real Prometheus scraping the task server over HTTP: two tasks
    created and completed, one created and still working."""
    from tests.prometheus_server import Prometheus
    from tests.subprocess_servers import free_port
    from tests.test_pipelines import ALERTS, dashboard_queries, values

    (tasks,) = dashboard_queries()["Tasks by tool and status (since the server started)"]
    metrics_port = free_port()
    server = HttpServer(sink.endpoint, tmp_path, "http", script=TASK_SERVER, OTEL_METRICS_EXPORTER="prometheus",
                        OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1", OTEL_EXPORTER_PROMETHEUS_PORT=str(metrics_port))
    prometheus = Prometheus(tmp_path, metrics_port, ALERTS)
    expected = {("commit", "working"): 2, ("commit", "completed"): 2, ("hold", "working"): 1}
    try:
        async with Client(f"http://127.0.0.1:{server.port}/mcp") as client:
            for path in ("a.md", "b.md"):
                await call_tool_task(client, "commit", {"path": path})
            await call_tool_task(client, "hold", {"path": "held"})
            await until(lambda: values(prometheus.query(tasks), "gen_ai_tool_name", "mcp_task_status") == expected,
                        seconds=30)
    finally:
        server.stop(signal.SIGTERM)
        prometheus.stop()
