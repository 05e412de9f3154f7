"""mcp 1.x: what the telemetry reads of a request's params is the same whether they are dumped as sent (for a
user's hook, or content capture) or read off the model (every other request): the fields it reads, and the trace
context a server's span is parented on."""

from __future__ import annotations

import pydantic
import pytest
from mcp import types
from opentelemetry import trace
from pydantic.alias_generators import to_camel

from otel_mcp_cancel.hooks.observations import wire_params
from otel_mcp_cancel.server_telemetry import parent_context

READ = ("name", "taskId", "uri", "arguments")  # besides `_meta`
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _requests() -> list[object]:
    meta = types.RequestParams.Meta(progressToken=7, traceparent=TRACEPARENT, tenant="acme")
    requests: list[object] = [
        types.CallToolRequest(method="tools/call", params=types.CallToolRequestParams(
            name="write_file", arguments={"path": "/tmp/a", "lines": [1, 2]}, _meta=meta)),
        types.CallToolRequest(method="tools/call", params=types.CallToolRequestParams(name="no_arguments")),
        types.ReadResourceRequest(method="resources/read", params=types.ReadResourceRequestParams(
            uri="file:///etc/hosts", _meta=meta)),
        types.GetPromptRequest(method="prompts/get", params=types.GetPromptRequestParams(
            name="greet", arguments={"who": "you"})),
    ]
    if hasattr(types, "GetTaskRequest"):  # mcp 1.23 and later: experimental tasks
        requests.append(types.GetTaskRequest(method="tasks/get", params=types.GetTaskRequestParams(taskId="t-1")))
    return requests


@pytest.mark.parametrize("request_", _requests(), ids=lambda request: request.method)
def test_the_view_reads_what_the_dump_holds(request_: object) -> None:
    as_sent, view = wire_params(request_, as_sent=True), wire_params(request_, as_sent=False)
    assert {key: view.get(key) for key in READ} == {key: as_sent.get(key) for key in READ}
    parents = [parent_context(params) for params in (as_sent, view)]
    if as_sent.get("_meta") is None:
        assert parents == [None, None]
    else:
        assert as_sent["_meta"]["traceparent"] == TRACEPARENT
        dumped, viewed = (trace.get_current_span(parent).get_span_context() for parent in parents)
        assert viewed == dumped
        assert (viewed.trace_id, viewed.span_id) == (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)


def test_a_request_without_params_has_none() -> None:
    request = types.ListToolsRequest(method="tools/list")
    assert wire_params(request, as_sent=True) is None
    assert wire_params(request, as_sent=False) is None


class _CamelParams(pydantic.BaseModel):
    """A framework's own params model, whose fields are named otherwise on the wire."""

    model_config = pydantic.ConfigDict(alias_generator=to_camel, populate_by_name=True)
    task_id: str


class _CamelRequest(pydantic.BaseModel):
    method: str = "tasks/get"
    params: _CamelParams


def test_a_model_named_otherwise_on_the_wire_is_dumped() -> None:
    request = _CamelRequest(params=_CamelParams(task_id="t-2"))
    assert wire_params(request, as_sent=False) == {"taskId": "t-2"} == wire_params(request, as_sent=True)


def test_only_a_models_meta_stands_for_the_wire_meta() -> None:
    """A peer's params named `meta` (not `_meta`) carry no trace context: only a 1.x model's `meta` is `_meta`."""
    assert parent_context({"meta": {"traceparent": TRACEPARENT}}) is None
    assert parent_context({"_meta": {"traceparent": TRACEPARENT}}) is not None
