"""What a hook reports of a request's end: how its handler ended (`HandlerEnd`) and the first answer that reached
the wire (`Answer`). Facts, not verdicts: `outcome` decides what they mean. Pure: no I/O, no OpenTelemetry, no mcp
imports.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from otel_mcp_cancel.conventions import ERROR_TYPE_CONNECTION_CLOSED


class HandlerEnd(enum.Enum):
    """How the request's handler finished, as seen where it returns."""

    RETURNED = "returned"  # a result that is not isError
    RETURNED_TOOL_ERROR = "returned_tool_error"  # a result with isError: true
    RAISED = "raised"  # an exception that becomes a JSON-RPC error
    INTERRUPTED = "interrupted"  # cancelled before it finished

    @property
    def completed(self) -> bool:
        """The handler ran to its end, so its side effects happened."""
        return self is not HandlerEnd.INTERRUPTED


class AnswerKind(enum.Enum):
    RESULT = "result"
    ERROR = "error"
    CANCEL_ACK = "cancel_ack"  # mcp 1.x answers a cancel with ErrorData(code=0, "Request cancelled")
    TRANSPORT_FAILED = "transport_failed"  # a client's transport raised under the request: no answer will come


@dataclass(frozen=True)
class Answer:
    """The first answer for the request id that went to the wire (a started write counts)."""

    kind: AnswerKind
    is_tool_error: bool = False
    code: int | None = None
    message: str | None = None  # a JSON-RPC error's message, as the peer sent it
    task_status: str | None = None  # the result created a task (MCP tasks), in this status (`task_status`)
    error_type: str | None = None  # a failed transport's, named by `transport_error_type`
    input_required: bool = False  # an interim result (2026-07-28): the tool asks its caller for input first

    @classmethod
    def result(cls, is_tool_error: bool, task_status: str | None = None) -> Answer:
        if task_status is None:  # the answers of most requests: one shared, frozen instance each
            return TOOL_ERROR_RESULT if is_tool_error else RESULT
        return cls(AnswerKind.RESULT, is_tool_error=is_tool_error, task_status=task_status)

    @classmethod
    def interim(cls) -> Answer:
        """A result that asks for input (`resultType: input_required`): the caller answers in a new request."""
        return INPUT_REQUIRED_RESULT

    @classmethod
    def error(cls, code: int | None, message: object = None) -> Answer:
        return cls(AnswerKind.ERROR, code=code, message=message if isinstance(message, str) else None)

    @classmethod
    def cancel_ack(cls) -> Answer:
        return cls(AnswerKind.CANCEL_ACK)

    @classmethod
    def transport_failed(cls, error: BaseException) -> Answer:
        return cls(AnswerKind.TRANSPORT_FAILED, error_type=transport_error_type(error),
                   message=TRANSPORT_FAILED_DESCRIPTION)

    @classmethod
    def connection_closed(cls) -> Answer:
        """A request that could not be sent because its connection had closed: the failure both SDK lines answer
        a request whose connection closes under it with (CONNECTION_CLOSED), so the two read the same."""
        return cls(AnswerKind.ERROR, code=CONNECTION_CLOSED_CODE, message=CONNECTION_CLOSED_MESSAGE)


RESULT = Answer(AnswerKind.RESULT)
TOOL_ERROR_RESULT = Answer(AnswerKind.RESULT, is_tool_error=True)
INPUT_REQUIRED_RESULT = Answer(AnswerKind.RESULT, input_required=True)

# What both SDK lines answer a request whose connection closed under it with.
CONNECTION_CLOSED_CODE = int(ERROR_TYPE_CONNECTION_CLOSED)
CONNECTION_CLOSED_MESSAGE = "Connection closed"

# What mcp 1.x answers a cancelled request with. A client seeing it knows the call was cancelled.
CANCEL_ACK_CODE = 0
CANCEL_ACK_MESSAGE = "Request cancelled"


TRANSPORT_FAILED_DESCRIPTION = "the client's transport failed"


def transport_error_type(error: BaseException) -> str:
    """What a client's transport failure is called: an HTTP answer's status code (`403`, `500`: what HTTP's
    conventions name a failed request by), else the exception's fully qualified type. Bounded by HTTP and by
    code, never by a peer's text."""
    status = getattr(getattr(error, "response", None), "status_code", None)
    if type(status) is int:
        return str(status)
    return exception_type(error)


def exception_type(error: BaseException) -> str:
    """The one name an exception's type goes by, in `error.type` and `exception.type` alike: its fully qualified
    name (`httpx.HTTPStatusError`), a builtin's bare (`ValueError`), as the conventions ask of a type."""
    kind = type(error)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def error_answer(code: int, message: str) -> Answer:
    """The answer a JSON-RPC error represents, as its receiver sees it: 1.x's cancel acknowledgement or an error."""
    if code == CANCEL_ACK_CODE and message == CANCEL_ACK_MESSAGE:
        return Answer.cancel_ack()
    return Answer.error(code, message)
