"""Faults in telemetry never reach a call: a meter whose instruments raise, `uninstrument()` mid-traffic."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
from opentelemetry.metrics import NoOpMeterProvider

from otel_mcp_cancel import McpCancelInstrumentor, faults
from otel_mcp_cancel.request_state import LIVE
from tests.conftest import SPANS, TRACER_PROVIDER
from tests.raw_peer import is_result, raw_session
from tests.servers import Gates, notes_server

pytestmark = pytest.mark.anyio


class RaisingInstrument:
    def record(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("metric backend is broken")

    add = record


class RaisingMeter:
    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: RaisingInstrument()


class RaisingMeterProvider(NoOpMeterProvider):
    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        return RaisingMeter()


async def test_a_meter_that_raises_costs_no_call_and_no_span(caplog, monkeypatch) -> None:
    monkeypatch.setattr(faults, "_reported", set())  # once per kind per process: start this test afresh
    caplog.set_level(logging.ERROR, logger="otel_mcp_cancel")
    SPANS.clear()
    instrumentor = McpCancelInstrumentor()
    instrumentor.instrument(tracer_provider=TRACER_PROVIDER, meter_provider=RaisingMeterProvider())
    try:
        async with raw_session(notes_server(Gates())) as peer:
            answers = [await peer.call(n, "tools/call", {"name": "echo", "arguments": {"text": "x"}}) for n in range(5)]
    finally:
        instrumentor.uninstrument()
    assert all(is_result(answer) for answer in answers)
    calls = [s for s in SPANS.get_finished_spans() if s.name == "tools/call echo"]
    assert len(calls) == 5 and all(s.attributes["tool.outcome"] == "ok" for s in calls)
    errors = [r for r in caplog.records if r.name == "otel_mcp_cancel" and r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == [
        "otel_mcp_cancel: finishing a server span failed; the MCP request itself is unaffected"
    ]


async def test_uninstrument_in_the_middle_of_traffic() -> None:
    """Calls in flight when instrumentation is removed finish normally; their spans end without a verdict,
    since the hooks that would have seen their answers are gone."""
    SPANS.clear()
    gates = Gates()
    instrumentor = McpCancelInstrumentor()
    instrumentor.instrument(tracer_provider=TRACER_PROVIDER)
    async with raw_session(notes_server(gates)) as peer:
        await peer.request("in-flight", "tools/call", {"name": "slow", "arguments": {"text": "before"}})
        await gates.started.wait()
        instrumentor.uninstrument()
        after = await peer.call("after", "tools/call", {"name": "echo", "arguments": {"text": "after"}})
        gates.let_go()
        with anyio.fail_after(10):
            in_flight = await peer.answer("in-flight")
    assert is_result(after) and is_result(in_flight)
    traced = {s.attributes.get("jsonrpc.request.id"): s for s in SPANS.get_finished_spans() if s.kind.name == "SERVER"}
    assert traced["in-flight"].end_time is not None and "tool.outcome" not in traced["in-flight"].attributes
    assert "after" not in traced or traced["after"].instrumentation_scope.name != "otel_mcp_cancel"
    assert len(LIVE) == 0
