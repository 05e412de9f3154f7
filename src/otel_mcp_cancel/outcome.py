"""What ok, failed, cancelled and ghost mean. The one place that decides it.

Every hook (server or client, mcp 1.x or 2.x) only reports what it saw:
how the handler ended, what answer reached the wire, and whether the caller
cancelled. `classify` turns those observations into the verdict that spans,
metrics and logs record. Pure: no I/O, no OpenTelemetry, no mcp imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from otel_mcp_cancel.answers import (
    CONNECTION_CLOSED_CODE,
    INPUT_REQUIRED_RESULT,
    RESULT,
    Answer,
    AnswerKind,
    HandlerEnd,
)
from otel_mcp_cancel.conventions import (
    CALLER_FAULT_CODES,
    CANCEL_REASON_TIMEOUT,
    CONNECTION_LOST_DESCRIPTION,
    ERROR_TYPE_CONNECTION_CLOSED,
    ERROR_TYPE_TIMEOUT,
    ERROR_TYPE_TOOL_ERROR,
    GHOST_RISK_IDEMPOTENT,
    GHOST_RISK_NONE,
    GHOST_RISK_UNKNOWN,
    GHOST_RISK_UNSAFE,
    MAX_ATTRIBUTE_LENGTH,
    OTHER,
    OUTCOME_CANCELLED,
    OUTCOME_FAILED,
    OUTCOME_OK,
    PROCESS_ENDED_DESCRIPTION,
    PROMPTS_GET,
    RESULT_TYPE_INPUT_REQUIRED,
    TASK_CANCELLED,
    TASK_COMPLETED,
    TASK_FAILED,
    TASK_FAILED_DESCRIPTION,
    TASK_STATUSES,
    TASK_UNSETTLED_DESCRIPTION,
    TOOL_ERROR_DESCRIPTION,
    TOOLS_CALL,
    UNANSWERED_DESCRIPTION,
)

# Why a client's session ended with a task unsettled, besides its own reasons (timeout | caller): not one to give up.
GAVE_UP_CONNECTION_LOST = "connection_lost"


@dataclass(frozen=True)
class Verdict:
    outcome: str | None  # None: the request created a task, whose terminal status will say
    error_type: str | None = None
    status_code: str | None = None  # rpc.response.status_code: the JSON-RPC error code, as a string
    span_error: bool = False
    description: str | None = None  # the ERROR status's description: what a backend's error column shows
    ghost_handler_outcome: str | None = None  # set only for a ghost: what the handler had produced
    task_status: str | None = None  # a task's status: at its creation, or the terminal one it reached
    result_type: str | None = None  # `input_required`: an interim answer, no outcome yet

    @property
    def is_ghost(self) -> bool:
        return self.ghost_handler_outcome is not None


# The verdicts of most requests: one shared, frozen instance each.
_OK = Verdict(OUTCOME_OK)
_TOOL_ERROR = Verdict(
    OUTCOME_FAILED, error_type=ERROR_TYPE_TOOL_ERROR, span_error=True, description=TOOL_ERROR_DESCRIPTION
)
SHARED_VERDICTS = (_OK, _TOOL_ERROR)
_INPUT_REQUIRED = Verdict(None, result_type=RESULT_TYPE_INPUT_REQUIRED)


def classify(
    handler: HandlerEnd | None,
    answer: Answer | None,
    cancelled: bool,
    *,
    timed_out: bool = False,
    cancelled_is_error: bool = False,
    caller_faults_unset: bool = True,
) -> Verdict:
    """Decide the outcome of one request.

    - An answer on the wire decides: a result is ok (failed if isError), a
      JSON-RPC error is failed. A cancel that came after it changes nothing.
      The server leaves the caller's faults' status UNSET; a client marks every error.
    - A client's transport that raised under the request (an HTTP status, an auth flow) is failed, named by
      the status or the exception, even though the caller then sees the transport's teardown as a cancel.
    - No answer (or only a cancel acknowledgement) after the caller cancelled
      is cancelled. If the handler had completed anyway, its answer was
      suppressed: that is a ghost. A caller's own timeout (`timed_out`, known
      only to a client) is error.type `timeout`: the call failed to get an
      answer in time, and the outcome still says cancelled, not failed. A
      caller that chose to stop has no error.type: nothing failed.
    - No answer and no cancel (a handler interrupted by a shutdown, a transport
      that failed under it) is a failure we cannot name: error.type _OTHER.
    - A result that created a task is no tool outcome yet: the task's terminal
      status decides (`classify_task`). Nor is a result that asks for input
      (`input_required`): the request that brings the input decides.
    """
    if answer is RESULT:  # most requests: a plain result, decided in one look
        return _OK
    if answer is INPUT_REQUIRED_RESULT:
        return _INPUT_REQUIRED
    if answer is not None and answer.kind is AnswerKind.RESULT and answer.task_status is not None:
        return Verdict(None, task_status=answer.task_status)  # bounded where the answer was noted
    if answer is not None and answer.kind is AnswerKind.RESULT:
        return _TOOL_ERROR if answer.is_tool_error else _OK
    if answer is not None and answer.kind is AnswerKind.TRANSPORT_FAILED:
        # The transport raised: the call failed, whatever cancellation then reached its caller as the transport
        # tore down.
        return Verdict(OUTCOME_FAILED, error_type=answer.error_type, span_error=True, description=answer.message)
    if answer is not None and answer.kind is AnswerKind.ERROR:
        code = None if answer.code is None else str(answer.code)
        return Verdict(
            OUTCOME_FAILED,
            error_type=code or OTHER,
            status_code=code,
            span_error=not (caller_faults_unset and answer.code in CALLER_FAULT_CODES),
            description=None if answer.message is None else answer.message[:MAX_ATTRIBUTE_LENGTH],
        )
    acknowledged = answer is not None and answer.kind is AnswerKind.CANCEL_ACK
    if cancelled or acknowledged:
        return Verdict(OUTCOME_CANCELLED, error_type=ERROR_TYPE_TIMEOUT if timed_out and cancelled else None,
                       span_error=cancelled_is_error, ghost_handler_outcome=suppressed(handler))
    return Verdict(OUTCOME_FAILED, error_type=OTHER, span_error=True, description=UNANSWERED_DESCRIPTION)


def classify_subscription(answer: Answer | None, *, caller_faults_unset: bool = True) -> Verdict:
    """Decide the outcome of a `subscriptions/listen`, which lives as long as its caller keeps it open: the caller
    closing it (a cancel, a hang-up, a closed stream or connection) is its normal end, as is the server's own
    graceful close (its result): ok, no cancel, no ghost. A refused listen (an error answer), or a client's
    transport that failed under it, failed, as any request does."""
    closed = answer is not None and answer.kind is AnswerKind.ERROR and answer.code == CONNECTION_CLOSED_CODE
    if answer is not None and answer.kind in (AnswerKind.ERROR, AnswerKind.TRANSPORT_FAILED) and not closed:
        return classify(None, answer, False, caller_faults_unset=caller_faults_unset)
    return _OK


def crossed(handler: HandlerEnd | None, answer: Answer | None) -> str | None:
    """The handler outcome of a call whose answer was written when its caller's cancel was read: the two
    crossed on the wire, the caller had given up, and its SDK discards the answer: a ghost. How the handler
    ended where that was seen; else what its result says (an error answered with no handler seen, such as an
    unknown tool's, did nothing). None for no answer, a cancel's acknowledgement, or a task's creation."""
    if answer is None or answer.kind is AnswerKind.CANCEL_ACK or answer.task_status is not None:
        return None
    if answer.input_required:  # the tool asked for input: it has not run to its end
        return None
    if handler is not None:
        return suppressed(handler)
    if answer.kind is AnswerKind.RESULT:
        return OUTCOME_FAILED if answer.is_tool_error else OUTCOME_OK
    return None


def late_answer(answer: Answer) -> str | None:
    """The handler outcome of an answer that reached a client after it gave up on the call (cancelled, or its
    timeout fired): the server did the work its caller was told was cancelled, a ghost the client sees. What the
    result says; None for an error (no sign anything ran), a cancel's acknowledgement or a task's creation."""
    return crossed(None, answer)


def suppressed(handler: HandlerEnd | None) -> str | None:
    """The handler outcome of a cancelled request's handler that ran to its end anyway, its answer reaching
    nobody: a ghost. None while the handler runs or when it was interrupted. Asked as a cancelled request is
    concluded, and again as the handler of one concluded before it ended (its caller hung up) ends."""
    if handler is None or not handler.completed:
        return None
    return OUTCOME_OK if handler is HandlerEnd.RETURNED else OUTCOME_FAILED


def task_status(status: object) -> str:
    """A task's status as the spec names it, or _OTHER: a peer cannot mint values."""
    return status if isinstance(status, str) and status in TASK_STATUSES else OTHER


def classify_task(
    status: str | None,
    work: HandlerEnd | None,
    is_tool_error: bool,
    *,
    gave_up: str | None = None,
    process_ended: bool = False,
    cancelled_is_error: bool = False,
) -> Verdict:
    """Decide a task-augmented tools/call's outcome from the terminal status its task reached.

    - completed is ok, failed if its result has isError; failed is failed, as a tool's error.
    - cancelled is cancelled whatever the work did next; work that ran to its end after
      the cancel did its side effects unseen: a ghost. (The spec keeps a cancelled task
      cancelled "even if execution continues to completion or fails".)
    - A client whose session ended before any terminal status reached it (`gave_up`, why its session ended):
      its own code leaving, or its own timeout on its last wait, gave up (cancelled, as for a request it
      stopped waiting for; `timeout` is then its error.type); a connection that closed under it did not,
      and that is the failure it saw.
    - A server whose process ends (`process_ended`) while the task's work runs in it stopped that work: a
      failure, named by its description.
    - No terminal status otherwise (its work was interrupted, or its session ended first) is a
      failure we cannot name, as for a request that ended unanswered.
    """
    if status == TASK_COMPLETED and not is_tool_error:
        return Verdict(OUTCOME_OK, task_status=status)
    if status in (TASK_COMPLETED, TASK_FAILED):
        description = TOOL_ERROR_DESCRIPTION if status == TASK_COMPLETED else TASK_FAILED_DESCRIPTION
        return Verdict(OUTCOME_FAILED, error_type=ERROR_TYPE_TOOL_ERROR, span_error=True, description=description,
                       task_status=status)
    if status == TASK_CANCELLED:
        return Verdict(OUTCOME_CANCELLED, span_error=cancelled_is_error, ghost_handler_outcome=suppressed(work),
                       task_status=status)
    if gave_up == GAVE_UP_CONNECTION_LOST:
        return Verdict(OUTCOME_FAILED, error_type=ERROR_TYPE_CONNECTION_CLOSED, span_error=True,
                       description=CONNECTION_LOST_DESCRIPTION)
    if gave_up is not None:
        return Verdict(OUTCOME_CANCELLED, error_type=ERROR_TYPE_TIMEOUT if gave_up == CANCEL_REASON_TIMEOUT else None,
                       span_error=cancelled_is_error)
    description = PROCESS_ENDED_DESCRIPTION if process_ended else TASK_UNSETTLED_DESCRIPTION
    return Verdict(OUTCOME_FAILED, error_type=OTHER, span_error=True, description=description)


def undelivered_ghost(status: str | None, work: HandlerEnd | None, outcome_seen: bool) -> str | None:
    """A finished task whose caller will never learn how it ended, believing nothing happened: a `tasks/cancel`
    that came after it finished, or its caller's session ended first. Returns the handler outcome of the
    work that happened (a ghost), or None. A caller that was told the task finished knows better."""
    if status not in (TASK_COMPLETED, TASK_FAILED) or outcome_seen:
        return None
    if work is not None:
        return suppressed(work)
    return OUTCOME_OK if status == TASK_COMPLETED else OUTCOME_FAILED


# Methods that only read: their ghosts repeat nothing.
READ_ONLY_METHODS = frozenset({"resources/read", PROMPTS_GET, "tools/list", "prompts/list", "resources/list"})


def ghost_risk(method: str, annotations: Mapping[str, Any] | None) -> str:
    """How dangerous a ghost of this request is, from the annotations the server registered for the tool.

    Hints are read as declared (camelCase, as on the wire). Read-only is `none`;
    declared destructive is `unsafe`; declared idempotent is `idempotent`; any other
    write is `unsafe`. A tool that declared none of the three hints is `unknown`.
    """
    if method != TOOLS_CALL:
        return GHOST_RISK_NONE if method in READ_ONLY_METHODS else GHOST_RISK_UNKNOWN
    hints = {key: (annotations or {}).get(key) for key in ("readOnlyHint", "destructiveHint", "idempotentHint")}
    if hints["readOnlyHint"] is None and hints["destructiveHint"] is None and hints["idempotentHint"] is None:
        return GHOST_RISK_UNKNOWN
    if hints["readOnlyHint"] is True:
        return GHOST_RISK_NONE
    if hints["destructiveHint"] is True:
        return GHOST_RISK_UNSAFE
    if hints["idempotentHint"] is True:
        return GHOST_RISK_IDEMPOTENT
    return GHOST_RISK_UNSAFE
