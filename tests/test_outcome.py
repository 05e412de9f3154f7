"""The outcome model on its own: every combination of observations and the verdict it must give."""

from __future__ import annotations

import pytest

from otel_mcp_cancel.conventions import TOOL_ERROR_DESCRIPTION as TOOL_ERROR
from otel_mcp_cancel.conventions import UNANSWERED_DESCRIPTION as UNANSWERED
from otel_mcp_cancel.outcome import Answer, HandlerEnd, Verdict, classify


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
