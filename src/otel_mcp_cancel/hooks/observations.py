"""What the hooks of both SDK lines share: reading wrapper arguments, observing a handler, reading a reason."""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import anyio

from otel_mcp_cancel.answers import Answer, HandlerEnd
from otel_mcp_cancel.attributes import bounded, http_protocol
from otel_mcp_cancel.conventions import (
    CLIENT_ADDRESS,
    CLIENT_PORT,
    ERROR_TYPE_CONNECTION_CLOSED,
    MCP_SESSION_ID,
    NETWORK_TRANSPORT_PIPE,
    NETWORK_TRANSPORT_TCP,
    RESULT_TYPE_INPUT_REQUIRED,
    TOOLS_CALL,
)
from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.hooks.reach import Reach
from otel_mcp_cancel.hooks.wrapping import Hook
from otel_mcp_cancel.http_exchange import exchange_of
from otel_mcp_cancel.messages import is_mapping, is_tool_error, message_field, model_values
from otel_mcp_cancel.outcome import task_status
from otel_mcp_cancel.request_state import RequestRecord
from otel_mcp_cancel.stdio_wire import StdioWire

# Set in the serving task's context when it calls `stdio_server`; the transport's writer task and the handler
# tasks inherit it.
stdio_wire: contextvars.ContextVar[StdioWire | None] = contextvars.ContextVar("otel_mcp_cancel_stdio_wire",
                                                                             default=None)


def network_transport(message_metadata: object) -> str | None:
    """tcp when the message came over HTTP (it carries the HTTP request), pipe on stdio, else unknown."""
    if getattr(message_metadata, "request_context", None) is not None:
        return NETWORK_TRANSPORT_TCP
    return NETWORK_TRANSPORT_PIPE if stdio_wire.get() is not None else None


def joined(record: RequestRecord) -> None:
    """A request whose handler begins after its session's caller hung up (read before the stream ended, its
    handler started after): nobody is there for its answer, as for the requests in flight when it hung up."""
    if record.in_session is not None and record.in_session.caller_left:
        record.note_caller_gone()


def served_over(record: RequestRecord) -> None:
    """A server's request that came over stdio is concluded as its answer's line is written (`stdio_wire`)."""
    if record.network_transport == NETWORK_TRANSPORT_PIPE:
        record.wire = stdio_wire.get()


def http_peer(record: RequestRecord, message_metadata: object) -> None:
    """What HTTP tells of a request that came over it: the client's address and port, HTTP's version, the
    session it belongs to (`Mcp-Session-Id`, sent on every request after `initialize`), and the POST its answer
    goes out on, which concludes it (`http_exchange`)."""
    request = getattr(message_metadata, "request_context", None)
    if request is None:
        return
    record.wire = exchange_of(request)
    version = request.scope.get("http_version")
    if isinstance(version, str):
        record.http_version = bounded(version)
    attributes = http_protocol(record.http_version)
    if request.client is not None:
        attributes[CLIENT_ADDRESS], attributes[CLIENT_PORT] = bounded(request.client.host), request.client.port
    session_id = request.headers.get("mcp-session-id")
    if session_id is not None:
        attributes[MCP_SESSION_ID] = bounded(session_id)
        if record.in_session is not None:  # for the session's cancels, which name no request of their own
            record.in_session.http_session_id = attributes[MCP_SESSION_ID]
    record.span.set_attributes(attributes)


# How mcp 1.x dumps a model to put it on the wire (1.12.3 to 1.30).
WIRE_DUMP = {"by_alias": True, "mode": "json", "exclude_none": True}


def wire_params(request: Any, as_sent: bool) -> dict[str, Any] | None:
    """A 1.x request model's params by their names on the wire, or None. `as_sent`: dumped as they go on the
    wire, for a user's hook and content capture; else read off the model without dumping it (the dump is the
    dearest step of a request's telemetry), the values as the model holds them: what the telemetry itself
    reads (name, taskId, uri, arguments, the trace context in `_meta`) is the same. Most requests' are the
    model's own values, read and never written: `_meta` is then `meta`, as the model holds it (see
    `server_telemetry.parent_context`)."""
    params = getattr(request, "params", None)
    if params is None:
        return None
    if as_sent or not _named_as_on_wire(type(params)):  # type: ignore[arg-type]  # a type is hashable
        return params.model_dump(**WIRE_DUMP)
    if "uri" not in params.__dict__ and not params.__pydantic_extra__:
        return params.__dict__
    # Copies, not comprehensions. A field left unset is None, as absent to a reader.
    fields = _values(params)
    meta = fields.pop("meta", None)
    if meta is not None:
        fields["_meta"] = meta if type(meta) is dict else _values(meta)
    uri = fields.get("uri")
    if uri is not None and type(uri) is not str:
        fields["uri"] = str(uri)  # a pydantic URL: on the wire, its text
    return fields


@functools.cache  # one entry per params class: a few dozen
def _named_as_on_wire(kind: type) -> bool:
    """Whether a pydantic params model names its fields as on the wire, but `meta` (`_meta`): the mcp 1.x
    params classes do (1.12.3 to 1.30); a framework's own may not, and is dumped."""
    fields = getattr(kind, "model_fields", None)
    if not isinstance(fields, dict):
        return False
    return all((field.alias is None or (name, field.alias) == ("meta", "_meta")) for name, field in fields.items())


def _values(model: Any) -> dict[str, Any]:
    """A model's values by name, and its extras (`_meta`'s trace context is one)."""
    values = dict(model.__dict__)
    extra = getattr(model, "__pydantic_extra__", None)
    if extra:
        values.update(extra)
    return values


def arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs[name]


DRAFT_TASK_META = "modelcontextprotocol.io/task"


class CreatedTask(NamedTuple):
    task_id: str  # cut to size
    status: object  # as the answer gave it
    ttl: float | None  # seconds its result is kept (`ttl`, or the extension's `ttlMs`), if the answer says


def created_task(result: object) -> CreatedTask | None:
    """The task a `CreateTaskResult` created, or None for any other result: nested (`{task: {...}}`, spec
    2025-11-25), flat with `resultType: "task"` (the 2026-07-28 tasks extension), or a stub result naming
    it in `_meta` (FastMCP 2.x, a draft of 2025-11-25)."""
    values = model_values(result)
    return None if values is not None and not _may_name_task(values) else _named_task(result)


# The fields besides `meta` that can name a task, as models name them.
_TASK_FIELDS = frozenset({"task", "resultType", "result_type"})


def _may_name_task(values: dict[str, Any]) -> bool:
    """Whether a plain model's `model_values` may name a task: most answers are decided in two looks."""
    if values.get("meta") is not None:
        return True
    if _TASK_FIELDS.isdisjoint(values):  # most results' models have none of these fields
        return False
    return values.get("task") is not None or "task" in (values.get("resultType"), values.get("result_type"))


def _named_task(result: object) -> CreatedTask | None:
    if message_field(result, "resultType") == "task":
        task = result
    else:
        meta = message_field(result, "_meta") if is_mapping(result) else message_field(result, "meta")
        task = message_field(result, "task") or (meta.get(DRAFT_TASK_META) if is_mapping(meta) else None)
    task_id = message_field(task, "taskId") if task is not None else None
    if not isinstance(task_id, str):
        return None
    ttl = message_field(task, "ttl")
    ttl = message_field(task, "ttlMs") if ttl is None else ttl
    seconds = ttl / 1000 if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and ttl >= 0 else None
    return CreatedTask(bounded(task_id), message_field(task, "status"), seconds)


def note_result(record: RequestRecord, result: object) -> None:
    """The answer is a result: note it (the first answer wins) and keep it for opt-in content capture."""
    if record.answer is not None:
        return
    record.result = result
    # Most answers are decided in one look: a wire dict (mcp 2.x's) or a plain model that names no task and no
    # interim answer.
    if type(result) is dict and (
            record.method != TOOLS_CALL or (result.get("_meta") is None and _TASK_FIELDS.isdisjoint(result))):
        record.note_answer(Answer.result(result.get("isError") is True))
    elif (values := model_values(result)) is not None and (record.method != TOOLS_CALL or not _may_name_task(values)):
        record.note_answer(Answer.result(values.get("is_error") is True or values.get("isError") is True))
    else:
        task = _named_task(result) if record.method == TOOLS_CALL else None
        if task is not None:
            record.task_id, record.task_ttl = task.task_id, task.ttl
            record.note_answer(Answer.result(False, task_status=task_status(task.status)))
        elif record.method == TOOLS_CALL and message_field(result, "resultType") == RESULT_TYPE_INPUT_REQUIRED:
            record.note_answer(Answer.interim())
        else:
            record.note_answer(Answer.result(is_tool_error(result)))
    if record.on_result is not None:
        with contained("telling a task of its answer"):
            record.on_result(record)


def connection_lost(error: BaseException | None) -> bool:
    """Whether a client session ended because its connection closed: the SDK's CONNECTION_CLOSED error, or
    the closed stream itself, alone or in the exception group that ended the session."""
    inner = getattr(error, "exceptions", None)  # an exception group (a backport's on Python 3.10)
    if isinstance(inner, tuple):
        return any(connection_lost(exception) for exception in inner)
    code = getattr(getattr(error, "error", None), "code", None)
    return str(code) == ERROR_TYPE_CONNECTION_CLOSED or isinstance(
        error, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError))


def cancel_reason(params: object) -> str | None:
    """The reason a `notifications/cancelled` gave, if it is a string, cut to size."""
    reason = params.get("reason") if is_mapping(params) else getattr(params, "reason", None)
    return bounded(reason) if isinstance(reason, str) else None


async def observed(
    note: Callable[[HandlerEnd], None],
    wrapped: Any,
    args: Any,
    kwargs: Any,
    note_exception: Callable[[BaseException], None] | None = None,
) -> Any:
    """Run a handler, the user's function inside it, or a task's work, and `note` how it ended (a record's
    first note wins: the innermost call that returned is where the side effects were done), and
    `note_exception` the exception it raised, if any."""
    try:
        result = await wrapped(*args, **kwargs)
    except anyio.get_cancelled_exc_class():
        note(HandlerEnd.INTERRUPTED)
        raise
    except BaseException as exc:
        note(HandlerEnd.RAISED)
        if note_exception is not None and isinstance(exc, Exception):
            note_exception(exc)
        raise
    note(HandlerEnd.RETURNED_TOOL_ERROR if is_tool_error(result) else HandlerEnd.RETURNED)
    return result


class HookSet:
    """One SDK line's hooks on one side, reporting to one telemetry object, and what else of the SDK they reach
    for (the line's `sdk_v1` or `sdk_v2`)."""

    sdk: Any  # the module declaring the line's reaches
    active = True  # a wrapper someone kept after uninstrument() becomes a pass-through
    offers_waiting_spans = False  # it opens spans around requests for them to take (`WaitingSpan`)
    finds_current_record = True  # a hook of it finds the request being served or sent by its side's `current`

    def __init__(self, telemetry: Any) -> None:
        self._telemetry = telemetry

    def stop(self) -> None:
        self.active = False
        self._telemetry.stop()

    def hooks(self) -> list[Hook]:
        raise NotImplementedError

    def reaches(self) -> list[Reach]:
        """What the hooks read of the SDK besides their targets: probed with them (`wrapping.apply`)."""
        return []
