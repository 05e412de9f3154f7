"""The stdio transport's stdout as the plugin follows it (`stdio_wire`), in the orders a real writer task and
a request's task can reach it: the flush first or the request first, a failed write, a reused id. The whole
path runs on real servers in tests/test_sessions.py; here each order is made on purpose."""

from __future__ import annotations

import json

import pytest
from opentelemetry.trace import INVALID_SPAN

from otel_mcp_cancel.outcome import Answer
from otel_mcp_cancel.request_state import RequestRecord
from otel_mcp_cancel.stdio_wire import NOT_AN_ANSWER, StdioWire, answered_id

STDOUT = object()  # the file the writer writes to


def line(message: dict) -> str:
    return json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":")) + "\n"


def answered(request_id: object) -> RequestRecord:
    record = RequestRecord("tools/call", {"name": "echo"}, request_id, "pipe", INVALID_SPAN)
    record.note_answer(Answer.result(False))
    return record


def write(wire: StdioWire, message: dict) -> None:
    assert wire.writing(STDOUT, line(message))
    assert wire.flushing(STDOUT)


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


def test_a_line_in_another_form_is_not_followed() -> None:
    wire = StdioWire()
    assert answered_id('{"id":7,"jsonrpc":"2.0","result":{}}') is NOT_AN_ANSWER
    assert answered_id('{"jsonrpc":"2.0","id":7') is NOT_AN_ANSWER
    assert not wire.writing(STDOUT, "hello\n") and not wire.flushing(STDOUT)
    assert not wire.writing(STDOUT, b'{"jsonrpc":"2.0","id":7,"result":{}}\n')


def test_a_request_waits_for_its_line_and_is_concluded_as_it_is_flushed() -> None:
    wire, concluded = StdioWire(), []
    record = answered(1)
    assert wire.holds(record, concluded.append)
    write(wire, {"method": "notifications/progress"})
    wire.flushed()
    assert concluded == []
    write(wire, {"id": 1, "result": {}})
    wire.flushed()
    assert concluded == [record] and record.answer is not None and not record.cancelled


def test_a_line_flushed_before_its_request_asks_concludes_it_at_once() -> None:
    wire, concluded = StdioWire(), []
    write(wire, {"id": 1, "result": {}})
    wire.flushed()
    record = answered(1)
    assert not wire.holds(record, concluded.append)
    assert concluded == [] and record.answer is not None
    again = answered(1)  # the id is forgotten once claimed: a reuse of it waits for its own line
    assert wire.holds(again, concluded.append)


def test_a_failed_write_leaves_every_answer_undelivered_and_every_caller_gone() -> None:
    wire, concluded = StdioWire(), []
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
    wire, concluded = StdioWire(), []
    first, second = answered(5), answered(5)
    assert wire.holds(first, concluded.append)
    assert wire.holds(second, concluded.append)
    assert concluded == [first]
    write(wire, {"id": 5, "result": {}})
    wire.flushed()
    assert concluded == [first, second]


def test_what_nobody_claims_is_forgotten_and_release_concludes_what_waits() -> None:
    wire, concluded = StdioWire(), []
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
