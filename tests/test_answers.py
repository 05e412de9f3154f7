"""Reading an answer: whether it is a tool error, and the task it created, whatever shape it comes in (a
wire dict, a model, a model with extras, a 1.x root model around one, a framework's own object)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from mcp import types
from pydantic import BaseModel, ConfigDict

from otel_mcp_cancel.hooks.observations import DRAFT_TASK_META, CreatedTask, created_task
from otel_mcp_cancel.messages import is_tool_error, model_values


def call_result(**wire: object) -> object:
    return types.CallToolResult.model_validate({"content": [], **wire})


def in_server_result(result: object) -> object:
    """A 1.x server's answer wraps its result in the root model `ServerResult`; on 2.x it is a plain union."""
    server_result = getattr(types, "ServerResult", None)
    return server_result(result) if isinstance(server_result, type) else result


class LooseResult(BaseModel):
    """A result model that keeps what it does not declare (1.x's results do; 2.x's drop it)."""

    model_config = ConfigDict(extra="allow")


@dataclass
class FrameworkResult:
    is_error: bool


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"content": [], "isError": True}, True),
        ({"content": [], "is_error": True}, False),  # a wire dict speaks the wire's names only
        ({"content": []}, False),
        (call_result(isError=True), True),
        (call_result(isError=False), False),
        (in_server_result(call_result(isError=True)), True),
        (LooseResult.model_validate({"isError": True}), True),  # in a model's extras
        (FrameworkResult(is_error=True), True),
        ("a tool's plain return value", False),
    ],
)
def test_a_tool_error_is_read_from_any_shape(answer: object, expected: bool) -> None:
    assert is_tool_error(answer) is expected


def test_a_plain_model_is_read_in_one_look_and_one_with_extras_name_by_name() -> None:
    assert model_values(call_result(isError=True)) is not None
    assert model_values(in_server_result(call_result())) is not None
    assert model_values(LooseResult.model_validate({"task": {"taskId": "t"}})) is None
    assert model_values({"isError": True}) is None
    assert model_values(FrameworkResult(is_error=True)) is None


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (call_result(isError=False), None),
        (in_server_result(call_result()), None),
        ({"content": []}, None),
        (
            LooseResult.model_validate({"task": {"taskId": "t1", "status": "working", "ttl": 60000}}),
            CreatedTask("t1", "working", 60.0),
        ),
        (
            in_server_result(call_result(_meta={DRAFT_TASK_META: {"taskId": "t2", "status": "working"}})),
            CreatedTask("t2", "working", None),
        ),
        ({"resultType": "task", "taskId": "t3", "status": "working", "ttlMs": 1500}, CreatedTask("t3", "working", 1.5)),
        ({"task": {"taskId": 7, "status": "working"}}, None),  # a task id must be a string
    ],
)
def test_the_task_an_answer_created_is_read_from_any_shape(answer: object, expected: CreatedTask | None) -> None:
    assert created_task(answer) == expected
