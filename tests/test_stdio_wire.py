"""The stdio transport's stdout as the plugin follows it (`stdio_wire`), in the orders a real writer task and
a request's task can reach it: the flush first or the request first, a failed write, a reused id; and its
bounds: nothing waits before the transport's lines were recognised, nor past MAX_HELD others or
MAX_HELD_SECONDS. The whole path runs on real servers in tests/test_sessions.py; here each order is made on
purpose."""

from __future__ import annotations

import json

import pytest
from opentelemetry.trace import INVALID_SPAN

from otel_mcp_cancel.answers import Answer
from otel_mcp_cancel.request_state import RequestRecord
from otel_mcp_cancel.stdio_wire import MAX_HELD, MAX_HELD_SECONDS, NOT_AN_ANSWER, StdioWire, answered_id


def line(message: dict) -> str:
    return json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":")) + "\n"


def answered(request_id: object) -> RequestRecord:
    record = RequestRecord("tools/call", {"name": "echo"}, request_id, "pipe", INVALID_SPAN)
    record.note_answer(Answer.result(False))
    return record


def write(wire: StdioWire, message: dict) -> None:
    wire.writing(line(message))


def recognised() -> StdioWire:
    """A wire that has seen one of its transport's answers reach the pipe (the `initialize` answer, on a server)."""
    wire = StdioWire()
    write(wire, {"id": "initialize", "result": {}})
    wire.flushed()
    assert wire.recognised
    return wire


@pytest.mark.parametrize(("message", "request_id"), [
    ({"id": 7, "result": {}}, 7),
    ({"id": 'a"b,c', "error": {"code": 1, "message": "m"}}, 'a"b,c'),
    ({"id": "x" * 10_000, "result": {}}, "x" * 10_000),
    ({"id": 3, "method": "sampling/createMessage"}, NOT_AN_ANSWER),  # the server's own request
    ({"method": "notifications/progress"}, NOT_AN_ANSWER),
    ({"id": None, "error": {"code": -32700, "message": "Parse error"}}, NOT_AN_ANSWER),
    ({"id": [1], "result": {}}, NOT_AN_ANSWER),
])
def test_an_answer_is_told_by_the_id_at_the_head_of_its_line(message: dict, request_id: object) -> None:
    found = answered_id(line(message))
    assert found is NOT_AN_ANSWER if request_id is NOT_AN_ANSWER else found == request_id


def test_a_line_in_another_form_is_not_an_answer() -> None:
    assert answered_id('{"id":7,"jsonrpc":"2.0","result":{}}') is NOT_AN_ANSWER
    assert answered_id('{"jsonrpc":"2.0","id":7') is NOT_AN_ANSWER
    assert answered_id("hello\n") is NOT_AN_ANSWER
    assert answered_id(b'{"jsonrpc":"2.0","id":7,"result":{}}\n') is NOT_AN_ANSWER


def test_until_its_lines_are_recognised_no_answer_waits_for_its_line() -> None:
    """A writer whose lines are in a form the wire does not read (another serializer, whitespace): every
    request is concluded as its answer is handed over, as on any other transport."""
    wire, concluded = StdioWire(), []
    for request_id in range(100):
        record = answered(request_id)
        assert not wire.holds(record, concluded.append)
        wire.writing(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {}}) + "\n")  # spaced: unread
        wire.flushed()
    assert not wire.recognised and concluded == []  # none held: each was concluded by its own task


def test_no_more_than_max_held_answers_wait_the_oldest_is_concluded() -> None:
    wire, concluded = recognised(), []
    records = [answered(request_id) for request_id in range(MAX_HELD + 3)]
    for record in records:
        assert wire.holds(record, concluded.append)
    assert concluded == records[:3]
    assert all(record.answer is not None and not record.cancelled for record in concluded)


def test_an_answer_whose_line_is_never_seen_is_concluded_once_it_waited_max_held_seconds() -> None:
    wire, concluded = recognised(), []
    first, second = answered(1), answered(2)
    assert wire.holds(first, concluded.append)
    (_, _, handed_over), = [entry for entry in wire._held.values() if entry[0] is first]
    assert wire.holds(second, concluded.append)
    wire.expire(handed_over + MAX_HELD_SECONDS / 2)
    assert concluded == []
    wire.expire(handed_over + MAX_HELD_SECONDS + 1)
    assert concluded == [first, second] and first.answer is not None and not first.cancelled


@pytest.mark.anyio
async def test_on_an_event_loop_an_unseen_line_is_concluded_within_the_bound_with_no_other_event() -> None:
    import anyio

    wire, concluded = recognised(), []
    record = answered(1)
    assert wire.holds(record, concluded.append)
    with anyio.fail_after(MAX_HELD_SECONDS * 10):  # a hang guard: the wire's own timer ends the wait
        while not concluded:
            await anyio.sleep(0.05)
    assert concluded == [record]


def test_a_request_waits_for_its_line_and_is_concluded_as_it_is_flushed() -> None:
    wire, concluded = recognised(), []
    record = answered(1)
    assert wire.holds(record, concluded.append)
    write(wire, {"method": "notifications/progress"})
    wire.flushed()
    assert concluded == []
    write(wire, {"id": 1, "result": {}})
    wire.flushed()
    assert concluded == [record] and record.answer is not None and not record.cancelled


def test_a_line_flushed_before_its_request_asks_concludes_it_at_once() -> None:
    wire, concluded = recognised(), []
    write(wire, {"id": 1, "result": {}})
    wire.flushed()
    record = answered(1)
    assert not wire.holds(record, concluded.append)
    assert concluded == [] and record.answer is not None
    again = answered(1)  # the id is forgotten once claimed: a reuse of it waits for its own line
    assert wire.holds(again, concluded.append)


def test_a_failed_write_leaves_every_answer_undelivered_and_every_caller_gone() -> None:
    wire, concluded = recognised(), []
    held = answered(1)
    assert wire.holds(held, concluded.append)
    write(wire, {"id": 1, "result": {}})
    wire.broke()
    assert concluded == [held]
    later = answered(2)
    assert not wire.holds(later, concluded.append)  # concluded now: undelivered
    for record in (held, later):
        assert record.answer is None and record.cancelled and record.caller_gone


def test_a_reused_id_concludes_the_earlier_answer_first() -> None:
    wire, concluded = recognised(), []
    first, second = answered(5), answered(5)
    assert wire.holds(first, concluded.append)
    assert wire.holds(second, concluded.append)
    assert concluded == [first]
    write(wire, {"id": 5, "result": {}})
    wire.flushed()
    assert concluded == [first, second]


def test_what_nobody_claims_is_forgotten_and_release_concludes_what_waits() -> None:
    wire, concluded = recognised(), []
    for request_id in range(1_000):  # answers of requests that were not traced
        write(wire, {"id": request_id, "result": {}})
        wire.flushed()
    assert wire.holds(answered(0), concluded.append)  # long forgotten: it waits
    assert not wire.holds(answered(999), concluded.append)  # just flushed
    wire.release()
    assert [record.request_id for record in concluded] == [0] and concluded[0].answer is not None


def test_a_request_with_no_answer_or_a_task_is_not_held() -> None:
    wire = StdioWire()
    unanswered = RequestRecord("tools/call", {}, 1, "pipe", INVALID_SPAN)
    task = RequestRecord("tools/call", {}, 2, "pipe", INVALID_SPAN)
    task.note_answer(Answer.result(False, task_status="working"))
    assert not wire.holds(unanswered, lambda record: None) and not wire.holds(task, lambda record: None)
