"""Tool arguments and results are never recorded unless the user opts in; then they are cut to size."""

from __future__ import annotations

import json

import pytest

from tests.conftest import instrumented
from tests.raw_peer import raw_session
from tests.servers import Gates, notes_server

pytestmark = pytest.mark.anyio

SECRET = "private-note-text-5a1e"


async def echo_twice(peer) -> None:
    await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": SECRET}})
    await peer.call(2, "tools/call", {"name": "echo", "arguments": {"text": "x" * 10_000}})


def exported(captured) -> str:
    spans = captured.spans.get_finished_spans()
    return repr([(s.name, dict(s.attributes), [dict(e.attributes) for e in s.events]) for s in spans])


async def test_by_default_no_argument_or_result_is_recorded(captured) -> None:
    async with raw_session(notes_server(Gates())) as peer:
        await echo_twice(peer)
    assert SECRET not in exported(captured)
    assert "gen_ai.tool.call" not in exported(captured)


async def test_opted_in_arguments_and_results_are_recorded_and_cut(monkeypatch) -> None:
    with instrumented(monkeypatch, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true") as captured:
        async with raw_session(notes_server(Gates())) as peer:
            await echo_twice(peer)
        calls = [s for s in captured.server_spans() if "tool.outcome" in s.attributes]
        spans = {s.attributes["jsonrpc.request.id"]: s for s in calls}
    assert json.loads(spans["1"].attributes["gen_ai.tool.call.arguments"]) == {"text": SECRET}
    assert SECRET in spans["1"].attributes["gen_ai.tool.call.result"]
    assert len(spans["2"].attributes["gen_ai.tool.call.arguments"]) == 4096
    assert len(spans["2"].attributes["gen_ai.tool.call.result"]) == 4096


def exception_events(captured) -> list[dict]:
    (span,) = [s for s in captured.server_spans() if s.name == "tools/call broken"]
    return [dict(e.attributes) for e in span.events if e.name == "exception"]


async def test_a_tools_exception_message_is_recorded_only_on_opt_in(monkeypatch) -> None:
    for opted_in in (False, True):
        with instrumented(monkeypatch, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=str(opted_in).lower()) as (
            captured
        ):
            async with raw_session(notes_server(Gates())) as peer:
                await peer.call(1, "tools/call", {"name": "broken", "arguments": {"text": SECRET}})
            (exception,) = exception_events(captured)
        assert exception["exception.type"] == "ValueError"
        assert exception.get("exception.message") == ("the tool failed" if opted_in else None)
