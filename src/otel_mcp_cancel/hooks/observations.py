"""What the hooks of both SDK lines share: reading wrapper arguments, observing a handler, reading a reason."""

from __future__ import annotations

import contextvars
import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import anyio
import wrapt

from otel_mcp_cancel.attributes import (
    bounded,
    http_protocol,
    is_mapping,
    is_tool_error,
    message_field,
    model_values,
)
from otel_mcp_cancel.conventions import (
    CANCEL_REASON_CALLER,
    CLIENT_ADDRESS,
    CLIENT_PORT,
    ERROR_TYPE_CONNECTION_CLOSED,
    MCP_SESSION_ID,
    NETWORK_TRANSPORT,
    NETWORK_TRANSPORT_PIPE,
    NETWORK_TRANSPORT_TCP,
    RESULT_TYPE_INPUT_REQUIRED,
    TOOLS_CALL,
)
from otel_mcp_cancel.faults import contained, fault, lost
from otel_mcp_cancel.hooks import client_transports
from otel_mcp_cancel.hooks.capabilities import (
    CLIENT_SESSIONS,
    HTTP_APP_EXPORT,
    STDIO_DELIVERY,
    TOOL_ENDS,
    TRANSPORT_FAILURES,
)
from otel_mcp_cancel.hooks.reach import Reach
from otel_mcp_cancel.hooks.wrapping import Hook
from otel_mcp_cancel.outcome import Answer, HandlerEnd, task_status
from otel_mcp_cancel.request_state import LIVE, RequestRecord, current_record
from otel_mcp_cancel.session_telemetry import SessionRecord, note_destination
from otel_mcp_cancel.stdio_wire import StdioWire, follow

# Set in the serving task's context when it calls `stdio_server`; the transport's writer task and the handler
# tasks inherit it.
stdio_wire: contextvars.ContextVar[StdioWire | None] = contextvars.ContextVar("otel_mcp_cancel_stdio_wire",
                                                                             default=None)


def network_transport(message_metadata: object) -> str | None:
    """tcp when the message came over HTTP (it carries the HTTP request), pipe on stdio, else unknown."""
    if getattr(message_metadata, "request_context", None) is not None:
        return NETWORK_TRANSPORT_TCP
    return NETWORK_TRANSPORT_PIPE if stdio_wire.get() is not None else None


def served_over(record: RequestRecord) -> None:
    """A server's request that came over stdio is concluded as its answer's line is written (`stdio_wire`)."""
    if record.network_transport == NETWORK_TRANSPORT_PIPE:
        record.wire = stdio_wire.get()


def http_peer(record: RequestRecord, message_metadata: object) -> None:
    """What HTTP tells of a request that came over it: the client's address and port, HTTP's version, and
    the session it belongs to (`Mcp-Session-Id`, sent on every request after `initialize`)."""
    request = getattr(message_metadata, "request_context", None)
    if request is None:
        return
    version = request.scope.get("http_version")
    if isinstance(version, str):
        record.http_version = bounded(version)
    attributes = http_protocol(record.http_version)
    if request.client is not None:
        attributes[CLIENT_ADDRESS], attributes[CLIENT_PORT] = bounded(request.client.host), request.client.port
    session_id = request.headers.get("mcp-session-id")
    if session_id is not None:
        attributes[MCP_SESSION_ID] = bounded(session_id)
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
    values = model_values(result)
    if values is not None and (record.method != TOOLS_CALL or not _may_name_task(values)):
        # A plain model (most answers): what it holds decides, in one look.
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


@dataclass(eq=False)
class ClientSessionEntry:
    """A client session, as its requests find it by the stream they are sent on."""

    record: SessionRecord
    client: weakref.ref[Any]  # the ClientSession
    destination: dict[str, Any]  # where its transport leads (`client_transports.of_stream`), as it began
    in_flight: weakref.WeakSet[RequestRecord] = field(default_factory=weakref.WeakSet)  # its requests' records


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


class FrameworkHooks(HookSet):
    """Hooks into the high-level server (MCPServer on 2.x, FastMCP on 1.x) and the stdio transport.

    The framework calls the user's own function in `Tool.run`, `ResourceTemplate.create_resource`,
    `FunctionResource.read` and `Prompt.render`. Its return is where side effects are done; the
    framework may still reach a checkpoint (and be cancelled) after it.
    """

    def framework_hooks(self, package: str, stdio_bindings: tuple[str, ...]) -> list[Hook]:
        return [
            Hook(f"{package}.tools.base", "Tool.run", self.tool_run, TOOL_ENDS),
            Hook(f"{package}.resources.templates", "ResourceTemplate.create_resource", self.user_function,
                 "how a resource template's function ended (ghosts of resource reads)"),
            Hook(f"{package}.resources.types", "FunctionResource.read", self.user_function,
                 "how a resource's function ended (ghosts of resource reads)"),
            Hook(f"{package}.prompts.base", "Prompt.render", self.user_function,
                 "how a prompt's function ended (ghosts of prompts)"),
            # `stdio_server` is imported by name into other modules too; each binding is wrapped.
            *(self.stdio_hook(module) for module in stdio_bindings),
            # A streamable HTTP app's sessions, served from its lifespan: its end is where a worker stops.
            Hook("mcp.server.streamable_http_manager", "StreamableHTTPSessionManager.run", self.http_serving,
                 HTTP_APP_EXPORT),
        ]

    def stdio_hook(self, module: str) -> Hook:
        return Hook(module, "stdio_server", self.stdio_server,
                    f"stdio servers started through `{module}.stdio_server` (network.transport=pipe, answers "
                    "followed to stdout, the calls its host is about to stop)")

    # Not coroutines: each returns the one to await, the framework's own when no request is being served, so
    # that no layer of ours is paid on the way.
    def tool_run(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        record = current_record.get()
        if not self.active or record is None:
            return wrapped(*args, **kwargs)
        record.tool_registered = True  # the framework only runs tools it has registered
        record.registered_annotations = getattr(instance, "annotations", None)
        # The exception it raised, if any, is noted: the framework turns it into an isError result.
        return observed(record.note_handler, wrapped, args, kwargs, record.note_exception)

    def user_function(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        record = current_record.get()
        if not self.active or record is None:
            return wrapped(*args, **kwargs)
        return observed(record.note_handler, wrapped, args, kwargs)

    async def session_run(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """mcp 1.x `Server.run` (or a framework's override of it): a session's serving loop, unless
        stateless HTTP runs it for one request."""
        stateless = args[4] if len(args) > 4 else kwargs.get("stateless", False)
        if not self.active or stateless:
            return await wrapped(*args, **kwargs)
        over_stdio = stdio_wire.get() is not None
        self._telemetry.serving()
        with self._telemetry.sessions.session(arg(args, kwargs, 0, "read_stream"), over_stdio):
            return await wrapped(*args, **kwargs)

    def stdio_server(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """The SDK's stdio transport, handed back as it is: while it runs, its requests are served over a pipe
        whose answers are followed to its own stdout."""
        transport = wrapped(*args, **kwargs)
        if not self.active or type(transport) is ObservedContext:  # a binding wrapped twice: once is enough
            return transport
        with contained("following a stdio transport"):
            wire = StdioWire()
            stdio_wire.set(wire)  # in the serving task's context: the writer and the handlers inherit it
            self._telemetry.serving()
            unfollow: list[Callable[[], None]] = []

            def entered(manager: Any) -> None:
                stdout = _transport_stdout(self.sdk.stdio_stdout, manager)
                if stdout is None:
                    lost(STDIO_DELIVERY, "the `stdio_server` entered holds no `stdout` to follow (another library "
                         "may have wrapped it); its calls are concluded as their answers are handed to the transport")
                else:
                    unfollow.append(follow(stdout, wire))

            def left() -> None:
                for stop in unfollow:
                    stop()
                wire.release()

            return ObservedContext(transport, entered, left)
        return transport

    def http_serving(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """A streamable HTTP app's session manager runs (its lifespan); as it stops, what is concluded is
        exported: uvicorn re-raises the signal it stopped on next, which kills the process before any exit hook."""
        manager = wrapped(*args, **kwargs)
        if not self.active:
            return manager
        with contained("following a streamable HTTP app"):
            self._telemetry.serving()
            return ObservedContext(manager, lambda _: None, self._telemetry.serving_ended)
        return manager

    async def request_stream_closing(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """Streamable HTTP: the stream a request's answer goes out on is closing. Before the answer was
        written, its caller hung up (its HTTP request ended), and the answer will be dropped. Not so with an
        event store: a caller may resume the stream and be given the answer then."""
        if self.active:
            with contained("noticing a request's stream closing"):
                request_id, sdk = arg(args, kwargs, 0, "request_id"), self.sdk
                if request_id in sdk.http_request_streams(instance, ()) and sdk.http_event_store(instance) is None:
                    stream = sdk.http_write_stream(instance)  # the one its session (1.x) or dispatcher (2.x) writes to
                    wire_id = str(request_id)
                    written_by = sdk.session_write_stream
                    LIVE.caller_gone_of(lambda record: stream is not None and written_by(record.session) is stream
                                        and str(record.request_id) == wire_id)
        return await wrapped(*args, **kwargs)


class ObservedContext(wrapt.ObjectProxy):
    """One of the library's async context managers, handed back as it is, with the plugin told once it has been
    entered (`entered(manager)`) and once it has been left (`left()`)."""

    def __init__(self, manager: Any, entered: Callable[[Any], None], left: Callable[[], None]) -> None:
        super().__init__(manager)
        self._self_entered, self._self_left = entered, left

    async def __aenter__(self) -> Any:
        value = await self.__wrapped__.__aenter__()
        with contained("observing a transport start"):
            self._self_entered(self.__wrapped__)
        return value

    async def __aexit__(self, *exc_info: Any) -> Any:
        try:
            return await self.__wrapped__.__aexit__(*exc_info)
        finally:
            with contained("observing a transport end"):
                self._self_left()


def _transport_stdout(local: Any, manager: Any) -> Any:
    """The stdout file object the SDK's entered `stdio_server` writes to (`local`: a local of its suspended
    generator, on both lines), or None."""
    stdout = local.of(getattr(getattr(manager, "gen", None), "ag_frame", None))
    return stdout if callable(getattr(stdout, "write", None)) and callable(getattr(stdout, "flush", None)) else None


class ClientHooks(HookSet):
    """What the sending side's hooks of both lines share: where a session's stream leads, its span, and how
    long the session lasted (from entering the `ClientSession` to leaving it)."""

    def __init__(self, telemetry: Any) -> None:
        super().__init__(telemetry)
        self._sessions: weakref.WeakKeyDictionary[Any, SessionRecord] = weakref.WeakKeyDictionary()
        # A request finds its session by the stream it is sent on (by id: streams are not weak-referenceable; an
        # entry leaves as its session ends). In process there is no stream, and no entry.
        self._by_stream: dict[int, ClientSessionEntry] = {}
        # Each streamable HTTP transport's session stream (the one its writer reads), to find its requests by.
        self._transports: weakref.WeakKeyDictionary[Any, object] = weakref.WeakKeyDictionary()

    def session_hooks(self, inherited: bool) -> list[Hook]:
        return [
            Hook("mcp.client.session", "ClientSession.__aenter__", self._enter_session, CLIENT_SESSIONS,
                 inherited=inherited),
            Hook("mcp.client.session", "ClientSession.__aexit__", self._leave_session, CLIENT_SESSIONS,
                 ("exc_type", "exc_val", "exc_tb"), inherited=inherited),
        ]

    def session_stream(self, session: Any) -> object:
        """The write stream a client session sends on (it differs between the lines)."""
        raise NotImplementedError

    async def _enter_session(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        entered = await wrapped(*args, **kwargs)  # a session that failed to start never was one
        if self.active:
            with contained("opening a client session"):
                record = self._telemetry.sessions.open()
                if record is not None:
                    stream = self.session_stream(instance)
                    destination = client_transports.of_stream(stream)
                    note_destination(record, destination)
                    self._sessions[instance] = record
                    if stream is not None:
                        self._by_stream[id(stream)] = ClientSessionEntry(record, weakref.ref(instance), destination)
        return entered

    async def _leave_session(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        with contained("leaving a client session"):
            self._telemetry.late_answers.forget(self.session_stream(instance))
            entry = self._by_stream.pop(id(self.session_stream(instance)), None)
            for request in list(entry.in_flight) if entry is not None else ():
                # Its own code closed the session under a call: that caller gave up, whatever error the
                # closing connection then raises into the call.
                request.note_caller_gone(CANCEL_REASON_CALLER)
        try:
            return await wrapped(*args, **kwargs)
        finally:
            with contained("closing a client session"):
                record = self._sessions.pop(instance, None)
                if record is not None:
                    version = getattr(instance, "protocol_version", None)  # mcp 2.x keeps it; 1.x does not
                    if isinstance(version, str):
                        record.protocol_version = bounded(version)
                    self._telemetry.sessions.close(record, arg(args, kwargs, 1, "exc_val"))
            with contained("ending a client session's tasks"):
                exc = arg(args, kwargs, 1, "exc_val")
                self._telemetry.tasks.gave_up(self.session_stream(instance), connection_lost(exc))

    def transport_hooks(self) -> list[Hook]:
        http = "mcp.client.streamable_http"
        return [
            *client_transports.transport_hooks(self._transport),
            # A streamable HTTP transport whose POST raised (an HTTP error status on mcp 1.x, an auth flow on either
            # line) tears its session down: the calls in flight failed, though their callers see a cancel.
            Hook(http, "StreamableHTTPTransport.post_writer", self._post_writer, TRANSPORT_FAILURES,
                 ("client", "write_stream_reader", "read_stream_writer", "write_stream")),
            Hook(http, "StreamableHTTPTransport._handle_post_request", self._post, TRANSPORT_FAILURES, ("ctx",)),
        ]

    async def _post_writer(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """The transport's writer: which session's stream it serves."""
        if self.active:
            with contained("following a client's transport"):
                self._transports[instance] = arg(args, kwargs, 3, "write_stream")
        return await wrapped(*args, **kwargs)

    async def _post(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        try:
            return await wrapped(*args, **kwargs)
        except Exception as exc:
            if self.active:
                with contained("noting a client transport's failure"):
                    entry = self._by_stream.get(id(self._transports.get(instance)))
                    for request in list(entry.in_flight) if entry is not None else ():
                        request.note_answer(Answer.transport_failed(exc))
            raise

    def _transport(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if not self.active:
            return wrapped(*args, **kwargs)
        return client_transports.remembered(wrapped, args, kwargs, self.sdk.http_client_transport)

    def open(
        self, method: str, params: Any, request_id: object, write_stream: object, *, checked: bool = False
    ) -> RequestRecord | None:
        """Start the CLIENT span of a request sent on `write_stream`, with its destination where known.
        `checked`: the hook asked `traced()` just now."""
        entry = self._by_stream.get(id(write_stream)) if write_stream is not None else None
        destination = entry.destination if entry is not None else client_transports.of_stream(write_stream)
        attributes = None
        if destination:  # none over memory streams
            attributes = {key: value for key, value in destination.items() if key != NETWORK_TRANSPORT}
            try:
                session_id = client_transports.session_id_of(write_stream)
                if session_id is not None:  # none before the server assigned one in its `initialize` answer
                    attributes[MCP_SESSION_ID] = bounded(session_id)
            except Exception:
                fault("reading a client's session id")
        transport = destination.get(NETWORK_TRANSPORT)
        record = self._telemetry.open(method, params, request_id, transport, attributes, checked=checked)
        if record is not None:
            record.session = write_stream  # the session it was sent in: its tasks end with it
            if entry is not None:
                session = entry.record
                if session.protocol_version is None:  # known once initialize (or discovery) answered
                    version = getattr(entry.client(), "protocol_version", None)  # mcp 2.x keeps it; 1.x: `resolve`
                    if isinstance(version, str):
                        session.protocol_version = bounded(version)
                record.in_session, record.protocol_version = session, session.protocol_version
                entry.in_flight.add(record)
        return record
