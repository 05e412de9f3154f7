"""The one ghost emitter, for the server, the client and tasks: wherever a ghost is found (a request's conclusion,
a cancel that crossed an answer, a handler that ended after its caller left, a task, an answer a client threw
away), it is marked with its kind on the span that carries it (the call's own while it is open, a
`tool.ghost_response` child of the call's once it has ended, or a task's), counted by kind on one counter, logged
as the WARNING in that span's context, and (a server's) remembered for the calls that retry it.

A ghost found after its call's record is gone is emitted from a `GhostSubject`: the few bounded facts about the
call that the emitter needs, made while the record was there. It holds no record, no session and no argument."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

from opentelemetry import trace
from opentelemetry.metrics import Counter
from opentelemetry.trace import Span, SpanContext, SpanKind, Tracer

from otel_mcp_cancel import tool_registry
from otel_mcp_cancel.attributes import bounded
from otel_mcp_cancel.conventions import (
    EVENT_GHOST_RETRIED,
    EVENT_GHOST_SUPPRESSED,
    GEN_AI_TOOL_NAME,
    GHOST_KIND_LATE_ANSWER,
    GHOST_LOG_PREFIX,
    GHOST_RISK_UNKNOWN,
    JSONRPC_REQUEST_ID,
    MCP_METHOD_NAME,
    MCP_TASK_ID,
    OTHER,
    TOOL_CALL_FINGERPRINT,
    TOOL_CANCEL_REASON,
    TOOL_GHOST_KIND,
    TOOL_GHOST_RISK,
    TOOL_HANDLER_OUTCOME,
    TOOL_RETRIED_GHOST_RISK,
    TOOLS_CALL,
)
from otel_mcp_cancel.faults import contained, fault
from otel_mcp_cancel.ghosts import LEDGER
from otel_mcp_cancel.messages import tool_arguments
from otel_mcp_cancel.outcome import ghost_risk
from otel_mcp_cancel.request_state import RequestRecord
from otel_mcp_cancel.retries import CallFingerprints, CallKey, RecentCalls

logger = logging.getLogger("otel_mcp_cancel")


class GhostSubject(NamedTuple):
    """What the emitter needs of a call that is, or may turn out, a ghost."""

    method: str
    tool: str | None  # the tool it called, cut to size
    tool_label: str | None  # that name as its metrics carry it: _OTHER for a tool the server does not serve
    request_id: object
    task_id: str | None
    call: SpanContext  # the call's span: a ghost found after it ended is a child of it
    # A server's: where its tool's annotations are read from, the risk of a repeat judged as a ghost is found (most
    # calls are none): the framework's own annotations object, and the server whose listed tools hold them. A
    # client does not guess.
    risk_from: tuple[Any, Any] | None
    retry_key: CallKey | None  # a server's tools/call: the tool and a digest of its arguments, for its retries
    cancel_reason: str | None = None  # a client's own reason for giving up (timeout | caller)


class GhostEmitter:
    def __init__(self, tracer: Tracer, counter: Counter, retries: RecentCalls | None = None,
                 retried: Counter | None = None, fingerprints: CallFingerprints | None = None) -> None:
        self._tracer = tracer
        self._counter = counter
        self.retries = retries  # None: a client, whose ghosts no call of its own retries
        self._retried = retried
        self.fingerprints = fingerprints  # None: no key was given

    def subject(self, record: RequestRecord) -> GhostSubject:
        """A server's call, as its ghost is reported: read after the request was resolved (its tool's name is
        then known to be served or not). Made for every answered tools/call: a cancel may yet cross it."""
        tool = called_tool(record)
        retries = self.retries
        key = retries.key_of(tool, tool_arguments(record.params)) if retries is not None and tool else None
        tool_label = None if tool is None else _tool_label(record, tool)
        return GhostSubject(record.method, tool, tool_label, _bounded_id(record.request_id), record.task_id,
                            record.span.get_span_context(), (record.registered_annotations, record.server), key)

    @staticmethod
    def client_subject(record: RequestRecord) -> GhostSubject:
        """A client's call it gave up on: an answer that comes for it later is a ghost it sees."""
        tool = called_tool(record)
        return GhostSubject(record.method, tool, tool, _bounded_id(record.request_id), record.task_id,
                            record.span.get_span_context(), None, None, record.cancel_reason)

    def emit(self, subject: GhostSubject, handler_outcome: str, kind: str, why: str, *, on: Span | None = None,
             scope: object = None) -> None:
        """A ghost of `subject`'s call, of `kind`, whose answer reached nobody because of `why`: marked on `on`
        (the call's open span, or a task's), or else on a `tool.ghost_response` span under the call's; counted,
        logged, and (with the session it came in, `scope`) remembered for its retries."""
        with contained("reporting a ghost"):
            risk = self._risk(subject)
            if on is not None:
                self._emit(subject, risk, handler_outcome, kind, why, on, scope)
                return
            attributes: dict[str, Any] = {TOOL_GHOST_KIND: kind}
            if subject.tool_label is not None:
                attributes[GEN_AI_TOOL_NAME] = subject.tool_label
            if subject.request_id is not None:
                attributes[JSONRPC_REQUEST_ID] = bounded(str(subject.request_id))
            # No mcp.method.name and no tool.outcome: it is not a second call, and is counted as none.
            span = self._tracer.start_span(EVENT_GHOST_SUPPRESSED,
                                           context=trace.set_span_in_context(trace.NonRecordingSpan(subject.call)),
                                           kind=SpanKind.INTERNAL, attributes=attributes)
            try:
                self._emit(subject, risk, handler_outcome, kind, why, span, scope)
            finally:
                span.end()

    def _emit(self, subject: GhostSubject, risk: str | None, handler_outcome: str, kind: str, why: str, span: Span,
              scope: object) -> None:
        ghost = {TOOL_HANDLER_OUTCOME: handler_outcome, TOOL_GHOST_KIND: kind}
        if risk is not None:
            ghost[TOOL_GHOST_RISK] = risk
        if subject.cancel_reason is not None:
            ghost[TOOL_CANCEL_REASON] = subject.cancel_reason
        # Attributes as well as the event: many stores and spanmetrics index attributes only.
        span.set_attributes(ghost)
        span.add_event(EVENT_GHOST_SUPPRESSED, ghost)
        counted: dict[str, Any] = {MCP_METHOD_NAME: bounded(subject.method), **ghost}
        if subject.tool_label is not None:
            counted[GEN_AI_TOOL_NAME] = subject.tool_label
        self._counter.add(1, counted)
        facts = dict(counted)  # bounded, as on the counter
        if subject.request_id is not None:
            facts[JSONRPC_REQUEST_ID] = bounded(str(subject.request_id))
        if subject.task_id is not None:
            facts[MCP_TASK_ID] = subject.task_id
        # Logged in the ghost span's context: an OTLP log record carries its trace and span ids.
        with trace.use_span(span, record_exception=False, set_status_on_exception=False):
            logger.warning(_message(subject, risk, handler_outcome, kind, why), extra=facts)
        if risk is not None:
            LEDGER.record(subject.tool, risk)
        if self.retries is not None and subject.retry_key is not None and scope is not None:
            self.retries.remember(scope, subject.retry_key, span.get_span_context(), risk or "",
                                  subject.call.span_id)

    def fingerprint(self, record: RequestRecord, span: Span) -> None:
        """Put the call's fingerprint on `span` (its own, or its task's). Asked only when the replicas share a key
        (`fingerprints`)."""
        tool, fingerprints = called_tool(record), self.fingerprints
        if tool is not None and fingerprints is not None:
            span.set_attribute(TOOL_CALL_FINGERPRINT, fingerprints.of(tool, tool_arguments(record.params)))

    def task_ghost(self, record: RequestRecord, span: Span, handler_outcome: str, kind: str, why: str) -> None:
        """A ghost of the task `record`'s call created, marked on `span` (the task's, or a late cancel's)."""
        with contained("reporting a ghost"):
            if self.fingerprints is not None:  # joined to its retries on other replicas
                self.fingerprint(record, span)
            self.emit(self.subject(record), handler_outcome, kind, why, on=span, scope=record.session)

    def match_retry(self, record: RequestRecord) -> None:
        """Link `record`'s call to the ghost it repeats, if any (before its own ghost, if any, is remembered).
        Asked only while `retries` holds any."""
        tool, retries = called_tool(record), self.retries
        if tool is None or record.session is None or retries is None:
            return
        retried = retries.find(record.session, retries.key_of(tool, tool_arguments(record.params)))
        own = record.span.get_span_context().span_id  # 0 where nothing traces: no call can be told from another
        if retried is not None and (own == 0 or retried.call_span_id != own):
            record.span.add_link(retried.span_context)
            record.span.set_attribute(TOOL_RETRIED_GHOST_RISK, retried.label)
            record.span.add_event(EVENT_GHOST_RETRIED, {TOOL_RETRIED_GHOST_RISK: retried.label})
            attributes = {TOOL_GHOST_RISK: retried.label, GEN_AI_TOOL_NAME: _tool_label(record, tool)}
            if self._retried is not None:
                self._retried.add(1, attributes)

    @staticmethod
    def _risk(subject: GhostSubject) -> str | None:
        """How dangerous a repeat of a server's ghost is, from its tool's annotations; None for a client's."""
        if subject.risk_from is None:
            return None
        registered, server = subject.risk_from
        try:
            annotations: Mapping[str, Any] | None = risk_hints(registered)
            if annotations is None and server is not None:
                annotations = tool_registry.listed_annotations(server, subject.tool)
            return ghost_risk(subject.method, annotations)
        except Exception:  # a failing lookup costs only the risk
            fault("judging a ghost's risk")
            return GHOST_RISK_UNKNOWN


# The hints a ghost's risk is read from, by their names on the wire and as mcp 2.x's models name them.
_HINTS = (("readOnlyHint", "read_only_hint"), ("destructiveHint", "destructive_hint"),
          ("idempotentHint", "idempotent_hint"))


def risk_hints(annotations: Any) -> dict[str, Any] | None:
    """A framework's own annotations model's risk hints, read off its values (not dumped: this runs for every
    answered call, whose ghost may yet be found)."""
    values = annotations if isinstance(annotations, Mapping) else getattr(annotations, "__dict__", None)
    if values is None:
        return None
    return {camel: values.get(snake, values.get(camel)) for camel, snake in _HINTS}


def _message(subject: GhostSubject, risk: str | None, handler_outcome: str, kind: str, why: str) -> str:
    tool = f" tool {subject.tool!r}" if subject.tool is not None else ""
    if kind == GHOST_KIND_LATE_ANSWER:
        return (f"{GHOST_LOG_PREFIX}: {handler_outcome} answer of {subject.method}{tool} (request id "
                f"{subject.request_id!r}) reached this client after it gave up on the call ({subject.cancel_reason}); "
                "the server did the work its caller was told was cancelled")
    task = f", task {subject.task_id}" if subject.task_id is not None else ""
    return (f"{GHOST_LOG_PREFIX}: {handler_outcome} answer of {subject.method}{tool} (request id "
            f"{subject.request_id!r}{task}, ghost risk {risk}) was suppressed because {why}; "
            "its side effects happened")


def _tool_label(record: RequestRecord, tool: str) -> str:
    """A called tool's name as the metrics carry it (`RequestRecord.metric_attributes`): a tool the server does not
    serve is _OTHER."""
    return tool if record.tool_registered else OTHER


def _bounded_id(request_id: object) -> object:
    """A request id as its WARNING names it: a number, or a string cut to size (a peer chooses it)."""
    return request_id if request_id is None or isinstance(request_id, int) else bounded(str(request_id))


def called_tool(record: RequestRecord) -> str | None:
    return record.target if record.method == TOOLS_CALL else None
