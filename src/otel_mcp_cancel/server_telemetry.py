"""The server's side: a request's span and duration (shared), the cancel notifications it receives, the tool a
call names, and the ghosts and retries its requests show (reported through `ghost_reporting`)."""

from __future__ import annotations

import atexit
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.propagate import extract
from opentelemetry.trace import Link, SpanKind, Tracer

from otel_mcp_cancel import observers, stdio_wire, tool_registry
from otel_mcp_cancel.answers import AnswerKind
from otel_mcp_cancel.attributes import KNOWN_METHODS, bounded, span_name
from otel_mcp_cancel.conventions import (
    EVENT_CANCEL_RECEIVED,
    GHOST_KIND_CROSSED,
    INITIALIZE,
    MCP_METHOD_NAME,
    MCP_SESSION_ID,
    NOTIFICATIONS_CANCELLED,
    PROMPTS_GET,
    TOOL_CANCEL_MESSAGE,
    TOOL_CANCELLED_REQUEST_ID,
    TOOLS_CALL,
)
from otel_mcp_cancel.crossing import Crossings
from otel_mcp_cancel.faults import contained, fault
from otel_mcp_cancel.flushing import Delivery, Flusher
from otel_mcp_cancel.ghost_reporting import GhostEmitter, GhostSubject, called_tool
from otel_mcp_cancel.instruments import Instruments
from otel_mcp_cancel.messages import is_mapping, request_fields
from otel_mcp_cancel.observers import suppressed_kind
from otel_mcp_cancel.outcome import suppressed
from otel_mcp_cancel.request_state import EARLY_CLAIMS, LIVE, RequestRecord, current_record
from otel_mcp_cancel.request_telemetry import RequestTelemetry, SpanOptions
from otel_mcp_cancel.retries import CallFingerprints, RecentCalls
from otel_mcp_cancel.serving import ambient_link
from otel_mcp_cancel.session_telemetry import SessionRecord, SessionTelemetry
from otel_mcp_cancel.task_requests import TaskRequests
from otel_mcp_cancel.task_telemetry import TaskTelemetry

# Why a ghost's answer reached nobody, as its WARNING says.
CROSSED = "its caller's cancel crossed it on the wire (the caller had given up, and its SDK discards the answer)"


def parent_context(fields: Mapping[str, Any] | None) -> Context | None:
    """The trace context a client put in a request's `_meta` (`fields`: its `request_fields`), or None to
    parent on the ambient context."""
    if fields is None:
        return None
    meta = fields.get("_meta")
    if meta is None:  # a 1.x model's own values (`wire_params`): W3C trace context is among its meta's extras
        meta = getattr(fields.get("meta"), "__pydantic_extra__", None)
    if meta is None or (type(meta) is not dict and not is_mapping(meta)) or "traceparent" not in meta:
        return None
    ctx = extract(meta)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


class ServerTelemetry(RequestTelemetry):
    kind = SpanKind.SERVER
    role = "server"
    known_methods = KNOWN_METHODS  # a peer's invented method is _OTHER unless the server serves it
    parent_context = staticmethod(parent_context)  # a client put its trace context in the request's `_meta`

    def __init__(
        self,
        tracer: Tracer,
        instruments: Instruments,
        retries: RecentCalls,
        options: SpanOptions,
        fingerprints: CallFingerprints | None = None,
    ) -> None:
        super().__init__(tracer, instruments.server_operation_duration, current_record, options)
        self.ghosts = GhostEmitter(tracer, instruments.ghost_responses, retries, instruments.server_ghost_retries,
                                   fingerprints)
        self.crossings = Crossings()
        self.delivery = Delivery(Flusher(options.tracer_provider, options.meter_provider))
        self._exit_hook: Callable[[], None] | None = None  # registered once a server serves
        # Frameworks' own registries, for a call whose tool never ran: (low-level server, name) -> its tool or None.
        self.registries: list[Callable[[Any, str], Any]] = []
        self.tasks = TaskTelemetry(tracer, self.record_duration, options.cancelled_is_error, ghosts=self.ghosts,
                                   began=self.serving)
        self.sessions = SessionTelemetry(instruments.server_session_duration, on_close=self.tasks.session_ended)
        task_requests = TaskRequests(self.tasks)
        self.on_task_answer = task_requests.answered
        self.served_targets: set[str] = set()
        self.observers = (
            ("telling a session about its request", observers.session_requests),
            observers.server_retries(self.ghosts),
            observers.suppressed_ghosts(self.ghosts),
            observers.crossed_answers(self.crossings, self.ghosts, self._crossed),
            observers.server_tasks(task_requests),
            observers.round_trips(self.round_trips),
        )
        # A low-level server's handler table, read by the SDK line's hooks (`sdk_v2.request_handlers`).
        self.request_handlers: Callable[[Any], object] = lambda server: None

    def serving(self) -> None:
        """A server starts serving (a session, a stdio transport, an HTTP app's session manager), or a task
        begins (served in process, perhaps): from now on, and not before, the process's exit ends what waits
        here before the SDK's own shutdown exports."""
        if self._exit_hook is None and not self.stopped:
            self._exit_hook = self.process_ending
            atexit.register(self._exit_hook)  # after the providers' own exit hooks, which export: runs first

    def serving_ended(self) -> None:
        """An HTTP app's session manager stopped (its lifespan ended): a uvicorn worker is killed next by the
        signal it stopped on, before any exit hook."""
        self.delivery.at_boundary()

    def hung_up(self, session: SessionRecord | None, gone: list[RequestRecord], over_stdio: bool,
                read_to_end: bool = True) -> None:
        """A session's caller hung up (its incoming stream ended), with `gone` still in flight and unanswered,
        while the session may serve on (the SDK's task group waits for task work and for handlers it cannot
        interrupt; FastMCP 2.14 keeps serving): for its tasks, it has ended. Over stdio, that caller was the
        process's only one, every task's result is out of reach, and the host kills the process soon (the
        SDK's client 2 s later): each call in flight is concluded now, as its caller gave up, the session is measured
        as ended, and what is concluded is exported before then unless the process exits first. `read_to_end`:
        the session read its stream to the end (not the hang-up watch, with the loop blocked), so every cancel
        its caller sent before leaving was read, and the ghosts waiting for that are reported."""
        if session is not None:
            session.caller_left = True
            if read_to_end:
                session.read_to_end = True
                for record in session.take_late_ghosts():
                    self._report_late_ghost(record)
            self.tasks.session_ended(session, every_task=session.over_stdio)
        if not over_stdio:
            return
        with EARLY_CLAIMS:
            claimed = [record for record in gone if not (record.concluded_early or record.concluding)]
            for record in claimed:
                record.concluded_early = True
        for record in claimed:
            self.conclude_later(record)
        if session is not None:
            self.sessions.measure(session)
        self.delivery.before_kill()

    def stdin_hung_up(self, wire: object) -> None:
        """A stdio server's stdin ended and its event loop did not say so within the grace: it is blocked (a
        handler's synchronous work). Its calls are concluded from here, as the loop would have."""
        with contained("concluding a stdio server's calls as its caller hung up"):
            gone = LIVE.caller_gone_of(lambda record: record.wire is wire)
            session = next((record.in_session for record in gone if record.in_session is not None), None)
            if session is None or not session.measured:  # else the loop saw it
                self.hung_up(session, gone, over_stdio=True, read_to_end=False)

    def handler_ended_late(self, record: RequestRecord) -> None:
        """Its caller left and it was concluded cancelled while its handler ran on; the handler has now ended,
        and if it ran to its end its answer reached nobody: a ghost, on a span of its own under the request's."""
        with contained("reporting a ghost"):
            if suppressed(record.handler) is None:
                return
            session = record.in_session
            if session is not None and not session.read_to_end:
                # Concluded by the hang-up watch, its loop blocked: a cancel its caller sent before leaving may be
                # unread yet. Its kind waits for the loop to read the stream to its end (soon: the loop is free).
                session.late_ghosts.append(record)
            else:
                self._report_late_ghost(record)

    def _report_late_ghost(self, record: RequestRecord) -> None:
        with contained("reporting a ghost"):
            ghost = suppressed(record.handler)
            if ghost is not None:
                self.ghosts.emit(self.ghosts.subject(record), ghost, *suppressed_kind(record), scope=record.session)
                self.delivery.before_kill()

    def process_ending(self) -> None:
        """The process is exiting: what waits for a caller or for work in this process ends now, before the SDK's
        own shutdown exports it."""
        self.delivery.exiting()
        with contained("ending tasks as the process exits"):
            self.tasks.process_ending()
        with contained("concluding answers not yet written to stdout"):
            stdio_wire.release_all()

    def stop(self) -> None:
        super().stop()
        if self._exit_hook is not None:
            atexit.unregister(self._exit_hook)
            self._exit_hook = None
        self.delivery.exiting()
        with contained("concluding answers not yet written to stdout"):
            stdio_wire.release_all()

    def answering(self, record: RequestRecord) -> None:
        """A request's answer is being written: a tools/call's is remembered, for a cancel that crosses it."""
        if record.method == TOOLS_CALL:
            try:
                self.crossings.answering(record)
            except Exception:
                fault("remembering an answered call")

    def unheard(self, session: object, request_id: object) -> None:
        """mcp 1.x dropped a cancel read before its request's handler began: the answer that follows crossed it."""
        self.crossings.unheard(session, request_id)

    def _crossed(self, subject: GhostSubject, handler_outcome: str, session: object) -> None:
        self.ghosts.emit(subject, handler_outcome, GHOST_KIND_CROSSED, CROSSED, scope=session)

    def cancel_received(
        self, params: Any, request_id: object, reason: str | None, cancelled: RequestRecord | None,
        session: object = None, in_session: SessionRecord | None = None,
    ) -> None:
        """One span for a `notifications/cancelled`, in flight or not, linked to the span of the request it
        cancels where that request is still in flight or was answered moments ago, and naming its id (links are
        dropped by some stores) and its HTTP session's (`in_session`), as the request's span does. A
        notification has no jsonrpc.request.id; the peer's reason text is on an event, never an attribute. A
        cancel for a tools/call already answered crossed that answer: a ghost."""
        if not is_instrumentation_enabled():
            return
        with contained("recording a cancel notification"):
            # An answered call (still in flight while its answer is written, or concluded) that the cancel crossed
            crossed = self.crossings.cancel_read(cancelled.session if cancelled is not None else session, request_id,
                                                 self._crossed)
            target = cancelled.span.get_span_context() if cancelled is not None else crossed
            attributes: dict[str, Any] = {MCP_METHOD_NAME: NOTIFICATIONS_CANCELLED}
            if request_id is not None:
                attributes[TOOL_CANCELLED_REQUEST_ID] = bounded(str(request_id))
            if in_session is not None and in_session.http_session_id is not None:
                attributes[MCP_SESSION_ID] = in_session.http_session_id
            # Its caller cancelled before it left, though the cancel was read after (a blocked loop's hang-up watch
            # concluded the call first): its ghost, if any, is of a cancel.
            for record in (cancelled, *(in_session.late_ghosts if in_session is not None else ())):
                if record is not None and record.request_id == request_id:
                    record.left_uncancelled = False
            links = [Link(target)] if target is not None else []
            parent = parent_context(request_fields(params))
            if parent is not None:
                links += ambient_link(parent) or []
            span = self.tracer.start_span(
                NOTIFICATIONS_CANCELLED,
                context=parent,
                kind=SpanKind.SERVER,
                attributes=attributes,
                links=links,
            )
            if reason is not None:
                span.add_event(EVENT_CANCEL_RECEIVED, {TOOL_CANCEL_MESSAGE: reason})
            span.end()

    def resolve(self, record: RequestRecord) -> None:
        # Named in its session's `initialize`; on the 2026-07-28 revision (no session), in each request's `_meta`.
        self.resolve_peer(record, record.params, keep=record.method == INITIALIZE)
        if not record.method_known and record.server is not None:
            record.method_known = tool_registry.serves_method(self.request_handlers(record.server), record.method)
        if record.method == PROMPTS_GET:
            # A prompt the server answered for is one it serves: its name is bounded by the server's prompts.
            record.tool_registered = record.answer is not None and record.answer.kind is AnswerKind.RESULT
        tool = called_tool(record) if not record.tool_registered and record.server is not None else None
        if tool is not None:
            # A framework's registry speaks for a call whose tool the framework never ran: cancelled before,
            # rejected by its middleware, or handed to a task engine.
            record.tool_registered = tool_registry.is_registered(record.server, tool)
            if not record.tool_registered:
                for registry in self.registries:
                    found = registry(record.server, tool)
                    if found is not None:  # its annotations give a ghost (of its task) its risk
                        record.tool_registered = True
                        record.registered_annotations = getattr(found, "annotations", None)
                        break
        if record.tool_registered and not record.target_named and record.target is not None:
            # Its next call names it as it starts. Only served names, each cut to size: bounded by the servers.
            if len(self.served_targets) < tool_registry.MAX_LISTED_NAMES:
                self.served_targets.add(span_name(record.method, record.target, True))
