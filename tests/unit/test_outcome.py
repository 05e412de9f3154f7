"""The outcome model on its own: every combination of observations and the verdict it must give."""

from __future__ import annotations

import pytest

from otel_mcp_cancel.answers import Answer, HandlerEnd
from otel_mcp_cancel.conventions import TOOL_ERROR_DESCRIPTION as TOOL_ERROR
from otel_mcp_cancel.conventions import UNANSWERED_DESCRIPTION as UNANSWERED
from otel_mcp_cancel.outcome import (
    GAVE_UP_CONNECTION_LOST,
    Verdict,
    classify,
    classify_subscription,
    classify_task,
    task_status,
    undelivered_ghost,
)


@pytest.mark.parametrize(
    ("handler", "answer", "cancelled", "expected"),
    [
        (HandlerEnd.RETURNED, Answer.result(False), False, Verdict("ok")),
        (HandlerEnd.RETURNED_TOOL_ERROR, Answer.result(True), False,
         Verdict("failed", "tool_error", None, True, TOOL_ERROR)),
        (HandlerEnd.RAISED, Answer.error(0), False, Verdict("failed", "0", "0", True)),
        (HandlerEnd.RAISED, Answer.error(-32603), False, Verdict("failed", "-32603", "-32603", True)),
        # A JSON-RPC error's message is the span's status description, cut like any peer-supplied string.
        (HandlerEnd.RAISED, Answer.error(-32603, "boom"), False, Verdict("failed", "-32603", "-32603", True, "boom")),
        (None, Answer.error(-32000, "x" * 1000), False, Verdict("failed", "-32000", "-32000", True, "x" * 256)),
        # The caller's fault: still failed, but the server span stays UNSET.
        (HandlerEnd.RAISED, Answer.error(-32602), False, Verdict("failed", "-32602", "-32602", False)),
        (None, Answer.error(-32601), False, Verdict("failed", "-32601", "-32601", False)),
        (None, Answer.error(-32700), False, Verdict("failed", "-32700", "-32700", False)),
        (None, Answer.error(-32600), False, Verdict("failed", "-32600", "-32600", False)),
        (None, Answer.error(-32002), False, Verdict("failed", "-32002", "-32002", False)),
        # A cancel that came after the answer was written changes nothing.
        (HandlerEnd.RETURNED, Answer.result(False), True, Verdict("ok")),
        (HandlerEnd.RAISED, Answer.error(-32000), True, Verdict("failed", "-32000", "-32000", True)),
        # Cancelled before any answer: interrupted handler, no ghost.
        (HandlerEnd.INTERRUPTED, None, True, Verdict("cancelled")),
        (None, None, True, Verdict("cancelled")),
        # Interrupted with no cancel from the caller: a shutdown, not the caller's choice.
        (HandlerEnd.INTERRUPTED, None, False, Verdict("failed", "_OTHER", None, True, UNANSWERED)),
        # Ghosts: the handler completed, its answer was suppressed.
        (HandlerEnd.RETURNED, None, True, Verdict("cancelled", ghost_handler_outcome="ok")),
        (HandlerEnd.RETURNED_TOOL_ERROR, None, True, Verdict("cancelled", ghost_handler_outcome="failed")),
        (HandlerEnd.RAISED, None, True, Verdict("cancelled", ghost_handler_outcome="failed")),
        # mcp 1.x acknowledges a cancel with an error answer; that is still a cancel.
        (HandlerEnd.INTERRUPTED, Answer.cancel_ack(), True, Verdict("cancelled")),
        (HandlerEnd.RETURNED, Answer.cancel_ack(), True, Verdict("cancelled", ghost_handler_outcome="ok")),
        # No answer, no cancel, handler not interrupted: a failure nobody named.
        (HandlerEnd.RETURNED, None, False, Verdict("failed", "_OTHER", None, True, UNANSWERED)),
        (None, None, False, Verdict("failed", "_OTHER", None, True, UNANSWERED)),
    ],
)
def test_classify(handler: HandlerEnd | None, answer: Answer | None, cancelled: bool, expected: Verdict) -> None:
    assert classify(handler, answer, cancelled) == expected


def test_cancelled_can_be_marked_error_on_request() -> None:
    interrupted = classify(HandlerEnd.INTERRUPTED, None, True, cancelled_is_error=True)
    assert interrupted == Verdict("cancelled", span_error=True)
    ghost = classify(HandlerEnd.RETURNED, None, True, cancelled_is_error=True)
    assert ghost == Verdict("cancelled", span_error=True, ghost_handler_outcome="ok")
    # Only cancelled spans change; a failure keeps its own status.
    assert classify(HandlerEnd.RAISED, Answer.error(-32602), False, cancelled_is_error=True).span_error is False


def test_verdict_ghost_flag() -> None:
    assert Verdict("cancelled", ghost_handler_outcome="ok").is_ghost
    assert not Verdict("cancelled").is_ghost


# Tasks: a call that created a task has no outcome yet; the task's terminal status decides.
_TASK_FAILED = "the task's status is failed"
_UNSETTLED = "the task's work ended without a terminal status"


@pytest.mark.parametrize(("status", "expected"), [("working", "working"), ("cancelled", "cancelled"),
                                                  ("paused", "_OTHER"), (7, "_OTHER"), (None, "_OTHER")])
def test_a_created_task_is_no_outcome_and_its_status_is_bounded(status, expected) -> None:
    answer = Answer.result(False, task_status=task_status(status))  # as the hooks note a creating answer
    verdict = classify(HandlerEnd.RETURNED, answer, cancelled=True)
    assert verdict == Verdict(None, task_status=expected)  # a cancel after the creation's answer changes nothing


@pytest.mark.parametrize(
    ("status", "work", "is_tool_error", "expected"),
    [
        ("completed", HandlerEnd.RETURNED, False, Verdict("ok", task_status="completed")),
        ("completed", None, False, Verdict("ok", task_status="completed")),
        ("completed", HandlerEnd.RETURNED_TOOL_ERROR, True,
         Verdict("failed", "tool_error", None, True, TOOL_ERROR, task_status="completed")),
        ("failed", HandlerEnd.RAISED, False, Verdict("failed", "tool_error", None, True, _TASK_FAILED,
                                                     task_status="failed")),
        # Cancelled, whatever the work did next: stopped, or run to its end (a ghost).
        ("cancelled", HandlerEnd.INTERRUPTED, False, Verdict("cancelled", task_status="cancelled")),
        ("cancelled", None, False, Verdict("cancelled", task_status="cancelled")),
        ("cancelled", HandlerEnd.RETURNED, False,
         Verdict("cancelled", ghost_handler_outcome="ok", task_status="cancelled")),
        ("cancelled", HandlerEnd.RAISED, False,
         Verdict("cancelled", ghost_handler_outcome="failed", task_status="cancelled")),
        # No terminal status: the work was stopped with its session.
        (None, HandlerEnd.INTERRUPTED, False, Verdict("failed", "_OTHER", None, True, _UNSETTLED)),
    ],
)
def test_a_task_outcome_is_its_terminal_status(status, work, is_tool_error, expected) -> None:
    assert classify_task(status, work, is_tool_error) == expected


def test_a_cancelled_task_is_an_error_only_if_asked() -> None:
    assert classify_task("cancelled", None, False, cancelled_is_error=True).span_error is True


def test_a_caller_that_left_before_any_terminal_status_gave_up() -> None:
    assert classify_task(None, None, False, gave_up="caller") == Verdict("cancelled")
    assert classify_task(None, None, False, gave_up="timeout") == Verdict("cancelled", error_type="timeout")
    assert classify_task("completed", None, False, gave_up="caller") == Verdict("ok", task_status="completed")


def test_a_caller_whose_connection_closed_before_any_terminal_status_saw_a_failure_not_its_own_cancel() -> None:
    assert classify_task(None, None, False, gave_up=GAVE_UP_CONNECTION_LOST) == Verdict(
        "failed", error_type="-32000", span_error=True,
        description="the connection closed before the task's outcome reached its caller")
    assert classify_task("cancelled", None, False, gave_up=GAVE_UP_CONNECTION_LOST).outcome == "cancelled"


@pytest.mark.parametrize(
    ("status", "work", "fetched", "ghost"),
    [
        ("completed", HandlerEnd.RETURNED, False, "ok"),
        ("completed", None, False, "ok"),  # no engine hook: the status says the work ran
        ("failed", HandlerEnd.RAISED, False, "failed"),
        ("failed", None, False, "failed"),
        ("completed", HandlerEnd.RETURNED, True, None),  # the caller had its answer
        ("cancelled", HandlerEnd.RETURNED, False, None),  # already cancelled: counted when its work ended
        (None, None, False, None),
    ],
)
def test_a_finished_task_whose_result_never_reaches_its_caller_is_a_ghost(status, work, fetched, ghost) -> None:
    assert undelivered_ghost(status, work, fetched) == ghost


def test_a_subscription_ends_ok_however_its_caller_closes_it_and_fails_only_when_refused() -> None:
    assert classify_subscription(None) == Verdict("ok")  # cancelled, or its caller hung up
    assert classify_subscription(Answer.result(is_tool_error=False)) == Verdict("ok")  # the server closed it
    assert classify_subscription(Answer.connection_closed()) == Verdict("ok")
    refused = classify_subscription(Answer.error(-32603, "Subscription limit reached"))
    assert (refused.outcome, refused.error_type, refused.span_error) == ("failed", "-32603", True)
