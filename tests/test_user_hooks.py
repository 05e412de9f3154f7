"""The user's request_hook and response_hook, as in the contrib instrumentations: what they are given,
on both sides, and that what they set lands on the span."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.trace import SpanKind

from otel_mcp_cancel import McpCancelInstrumentor
from otel_mcp_cancel.user_hooks import McpRequestInfo, McpResponseInfo
from tests.conftest import SPANS, instrumentation, is_request_span
from tests.raw_peer import is_result, raw_session, served_in_memory
from tests.sdk_client import sdk_client
from tests.servers import Gates, make_ghost, notes_server
from tests.support import cancel_when, until

pytestmark = pytest.mark.anyio


async def test_hooks_see_each_request_and_its_outcome_on_both_sides(monkeypatch) -> None:
    monkeypatch.setenv("OTEL_PYTHON_MCP_CANCEL_COURTESY_CANCEL", "on")  # a 1.x client tells the server it gave up
    requests: list[McpRequestInfo] = []
    responses: list[tuple[str, str, McpResponseInfo]] = []

    def request_hook(span: Any, request: McpRequestInfo) -> None:
        requests.append(request)
        span.set_attribute("app.request_hook", request.side)

    def response_hook(span: Any, request: McpRequestInfo, response: McpResponseInfo) -> None:
        if request.method == "tools/call":
            responses.append((request.side, request.params["name"], response))
        span.set_attribute("app.response_hook", response.outcome)

    SPANS.clear()
    gates = Gates()
    with instrumentation(meter_provider=MeterProvider(), request_hook=request_hook, response_hook=response_hook):
        async with sdk_client(served_in_memory(notes_server(gates))) as client:
            await client.call_tool("echo", {"text": "a"})
            await client.call_tool("broken", {"text": "b"})
            await cancel_when(gates.started.wait, lambda: client.call_tool("shielded_write", {"path": "x.md"}))
            await client.ping()  # the server has read the cancel
            gates.let_go()
            await until(lambda: ("server", "shielded_write") in [(side, tool) for side, tool, _ in responses])

    calls = [(r.side, r.params["name"], r.params["arguments"]) for r in requests if r.method == "tools/call"]
    sent = (("echo", {"text": "a"}), ("broken", {"text": "b"}), ("shielded_write", {"path": "x.md"}))
    assert sorted(calls) == sorted((side, tool, arguments) for side in ("client", "server") for tool, arguments in sent)
    assert all(r.request_id is not None for r in requests if r.side == "server")
    assert sorted(responses) == sorted([
        ("client", "echo", McpResponseInfo("ok", None, False)),
        ("server", "echo", McpResponseInfo("ok", None, False)),
        ("client", "broken", McpResponseInfo("failed", None, False)),
        ("server", "broken", McpResponseInfo("failed", None, False)),
        ("client", "shielded_write", McpResponseInfo("cancelled", "caller", False)),
        ("server", "shielded_write", McpResponseInfo("cancelled", "caller cancelled", True)),
    ])
    request_spans = [
        s
        for s in SPANS.get_finished_spans()
        if s.instrumentation_scope.name == "otel_mcp_cancel" and is_request_span(s)
    ]
    assert sum(s.attributes["mcp.method.name"] == "tools/call" for s in request_spans) == 6
    for span in request_spans:  # every request's span, whatever its method
        side = "server" if span.kind is SpanKind.SERVER else "client"
        assert span.attributes["app.request_hook"] == side
        assert span.attributes["app.response_hook"] == span.attributes.get("tool.outcome", "ok")


async def test_the_readme_example_hook_reads_the_callers_meta() -> None:
    def request_hook(span: Any, request: McpRequestInfo) -> None:
        meta = (request.params or {}).get("_meta") or {}
        if "tenant" in meta:
            span.set_attribute("app.tenant", str(meta["tenant"]))

    SPANS.clear()
    with instrumentation(meter_provider=MeterProvider(), request_hook=request_hook):
        async with raw_session(notes_server(Gates())) as peer:
            params = {"name": "echo", "arguments": {"text": "a"}, "_meta": {"tenant": "acme"}}
            assert is_result(await peer.call(1, "tools/call", params))
    (span,) = [s for s in SPANS.get_finished_spans() if s.name == "tools/call echo"]
    assert span.attributes["app.tenant"] == "acme"


async def test_the_documented_hooks_run_as_written() -> None:
    """docs/operations.md's hooks, run as written: the tenant from `_meta` and a ghost's mark land on the spans."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    (block,) = re.findall(r"^## Hooks\n.*?^```python\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    SPANS.clear()
    gates = Gates()

    def tool_calls() -> list[Any]:
        return [s for s in SPANS.get_finished_spans() if s.name.startswith("tools/call")]

    try:
        exec(block, {})  # instruments with the global providers, as the page's reader would
        async with raw_session(notes_server(gates)) as peer:
            params = {"name": "echo", "arguments": {"text": "a"}, "_meta": {"tenant": "acme"}}
            assert is_result(await peer.call(1, "tools/call", params))
            await make_ghost(peer, gates, 2, "shielded_write", "a.md")
            await until(lambda: len(tool_calls()) == 2)
    finally:
        McpCancelInstrumentor().uninstrument()
    spans = {s.attributes["jsonrpc.request.id"]: s for s in tool_calls()}
    assert (spans["1"].attributes.get("app.tenant"), spans["1"].attributes.get("app.needs_reconciliation")) == (
        "acme", None)
    assert (spans["2"].attributes.get("app.tenant"), spans["2"].attributes.get("app.needs_reconciliation")) == (
        None, True)
    SPANS.clear()
