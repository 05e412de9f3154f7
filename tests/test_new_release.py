"""A new minor of mcp or FastMCP that moves what the plugin hooks does not switch the plugin off, nor make it
lie. Each hook target of the installed releases is, in turn, renamed (the plugin looks for a name the release no
longer has) and, where its wrapper reads parameters, reshaped (the same callable behind another signature), as a
new release would. Each time: one WARNING names the capability lost, no fault is logged, the caller's answers
are those the same traffic gets with no plugin at all, and every span and point the plugin still makes is one it
makes with every hook in place (so what is left is exact: a verdict is missing, never wrong)."""

from __future__ import annotations

import functools
import inspect
import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import anyio
import pytest

from otel_mcp_cancel import faults
from otel_mcp_cancel.hooks import wrapping
from otel_mcp_cancel.hooks.wrapping import Hook
from tests.conftest import Captured, instrumentation, instrumented
from tests.raw_peer import served_in_memory
from tests.sdk_client import is_tool_error, sdk_client
from tests.servers import Gates, notes_server
from tests.support import MCP_MAJOR, cancel_when

pytestmark = pytest.mark.anyio

# What a span's verdict is made of, and what a point counts by: a lost capability may leave a detail out (a
# protocol version, a tool's name folded to _OTHER, a ghost unseen), never make one of these wrong.
VERDICT = ("mcp.method.name", "tool.outcome", "error.type", "tool.handler_outcome")


async def traffic() -> list[tuple[bool, str]]:
    """Through the SDK's client and server: ok, isError, an unknown tool, a call cancelled mid-work, ok again."""
    gates = Gates()
    async with sdk_client(served_in_memory(notes_server(gates))) as client:
        with anyio.fail_after(10):
            answers = [await client.call_tool("echo", {"text": "a"}), await client.call_tool("broken", {"text": "b"}),
                       await client.call_tool("no_such_tool", {})]
            await cancel_when(gates.started.wait, lambda: client.call_tool("slow", {"text": "c"}))
            answers.append(await client.call_tool("echo", {"text": "d"}))
    return [(is_tool_error(answer), answer.content[0].text if answer.content else "") for answer in answers]


def telemetry(captured: Captured) -> tuple[Counter, Counter]:
    """The verdict of every span ours made (kind, verdict attributes, status), and the count of every duration
    point by its verdict attributes."""
    spans = Counter(
        (span.kind.name, *(span.attributes.get(key) for key in VERDICT), span.status.status_code.name)
        for span in captured.spans.get_finished_spans() if span.instrumentation_scope.name == "otel_mcp_cancel")
    points: Counter = Counter()
    for metric, found in captured.collect().items():
        if metric.endswith(".operation.duration"):
            for point in found:
                points[(metric, *(point.attributes.get(key) for key in VERDICT))] += point.count
    return spans, points


@contextmanager
def captured_with(monkeypatch: pytest.MonkeyPatch, rewrite: Any = None) -> Iterator[Captured]:
    """Instrumented, every hook set's hooks passed through `rewrite` (as a release would have moved them)."""
    real_apply = wrapping.apply
    with monkeypatch.context() as patch:
        if rewrite is not None:
            patch.setattr(wrapping, "apply", lambda hooks, reaches=(): real_apply(rewrite(list(hooks)), reaches))
        with instrumented(patch) as captured:
            yield captured


def every_hook() -> list[Hook]:
    with instrumentation() as instrumentor:
        return [hook for hook_set in instrumentor._hook_sets for hook in hook_set.hooks()]


def renamed(target: Hook) -> Any:
    def rewrite(hooks: list[Hook]) -> list[Hook]:
        return [hook._replace(attribute=f"{hook.attribute}_renamed") if hook[:2] == target[:2] else hook
                for hook in hooks]
    return rewrite


@contextmanager
def reshaped(hook: Hook) -> Iterator[None]:
    """The target, behind a pass-through that takes (*args, **kwargs): the host works as before."""
    owner, name = wrapping.target(hook)
    original = inspect.getattr_static(owner, name)
    bound = getattr(owner, name)
    if inspect.iscoroutinefunction(bound):
        async def passthrough(*args: Any, **kwargs: Any) -> Any:
            return await bound_of(args)(*args[1 if method else 0:], **kwargs)
    else:
        def passthrough(*args: Any, **kwargs: Any) -> Any:
            return bound_of(args)(*args[1 if method else 0:], **kwargs)
    method = "." in hook.attribute

    def bound_of(args: tuple) -> Any:
        return functools.partial(original, args[0]) if method else original

    setattr(owner, name, passthrough)
    try:
        yield
    finally:
        setattr(owner, name, original)


def lost_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.__dict__[faults.LOST_ATTRIBUTE] for record in caplog.records
            if faults.LOST_ATTRIBUTE in record.__dict__]


def fault_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if faults.FAULT_ATTRIBUTE in record.__dict__]


def capability(hook: Hook) -> str:
    return hook.capability or f"what `{hook.target_name}` tells"


async def test_each_hook_target_moved_by_a_release_loses_one_named_capability_and_nothing_else(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="otel_mcp_cancel")
    uninstrumented = await traffic()
    with captured_with(monkeypatch) as captured:
        assert await traffic() == uninstrumented
        whole_spans, whole_points = telemetry(captured)
    assert lost_lines(caplog) == [] and fault_lines(caplog) == []
    hooks = every_hook()
    assert len(hooks) >= (25 if MCP_MAJOR == 2 else 20)
    problems = []
    for hook in hooks:
        moves = [("renamed", renamed(hook), nullcontext())]
        if hook.params:
            moves.append(("reshaped", None, reshaped(hook)))
        for move, rewrite, around in moves:
            caplog.clear()
            with around, captured_with(monkeypatch, rewrite) as captured:
                answers = await traffic()
                spans, points = telemetry(captured)
            where = f"{hook.target_name} {move}"
            if lost_lines(caplog) != [capability(hook)]:
                problems.append(f"{where}: lost {lost_lines(caplog)}, not [{capability(hook)!r}]")
            if fault_lines(caplog):
                problems.append(f"{where}: faults {fault_lines(caplog)}")
            if answers != uninstrumented:
                problems.append(f"{where}: the caller got {answers}")
            if spans - whole_spans:
                problems.append(f"{where}: verdicts made only now: {sorted(spans - whole_spans, key=str)}")
            if points - whole_points:
                problems.append(f"{where}: points made only now: {dict(points - whole_points)}")
    assert not problems, "\n".join(problems)
