"""The server's side: a request's span and duration (shared), and its ghosts: risk, retries, counter,
WARNING line and `ghost_stats()`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.propagate import extract
from opentelemetry.trace import Link, Span, SpanKind, Tracer

from otel_mcp_cancel import tool_registry
from otel_mcp_cancel.attributes import KNOWN_METHODS, bounded, camel_case, is_mapping, tool_arguments
from otel_mcp_cancel.conventions import (
    EVENT_GHOST_RETRIED,
    EVENT_GHOST_SUPPRESSED,
    EVENT_RESPONSE_WRITE_INTERRUPTED,
    GEN_AI_TOOL_NAME,
    GHOST_LOG_PREFIX,
    GHOST_RISK_UNKNOWN,
    JSONRPC_REQUEST_ID,
    MCP_CANCEL_REASON,
    MCP_METHOD_NAME,
    MCP_TASK_ID,
    NOTIFICATIONS_CANCELLED,
    TOOL_GHOST_RISK,
    TOOL_HANDLER_OUTCOME,
    TOOL_RETRIED_GHOST_RISK,
    TOOLS_CALL,
)
from otel_mcp_cancel.faults import contained, fault
from otel_mcp_cancel.ghosts import LEDGER
from otel_mcp_cancel.instruments import Instruments
from otel_mcp_cancel.outcome import Verdict, ghost_risk
from otel_mcp_cancel.request_state import RequestRecord, current_record
from otel_mcp_cancel.request_telemetry import RequestTelemetry, SpanOptions
from otel_mcp_cancel.retries import GhostRetries
from otel_mcp_cancel.session_telemetry import SessionTelemetry, note_request
from otel_mcp_cancel.task_telemetry import TaskTelemetry

logger = logging.getLogger("otel_mcp_cancel")


def parent_context(params: Any) -> Context | None:
    """The trace context a client put in `params._meta`, or None to parent on the ambient context."""
    meta = params.get("_meta") if is_mapping(params) else None
    if not is_mapping(meta) or "traceparent" not in meta:
        return None
    ctx = extract(meta)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


class ServerTelemetry(RequestTelemetry):
    kind = SpanKind.SERVER
    role = "server"

    def __init__(
        self,
        tracer: Tracer,
        instruments: Instruments,
        retries: GhostRetries,
        options: SpanOptions,
    ) -> None:
        super().__init__(tracer, instruments.server_operation_duration, current_record, options)
        self._instruments = instruments
        self._retries = retries
        # Frameworks' own registries, for a call whose tool never ran: (low-level server, name) -> its tool or None.
        self.registries: list[Callable[[Any, str], Any]] = []
        self.tasks = TaskTelemetry(tracer, self, options.cancelled_is_error, ghosts=self)
        self.sessions = SessionTelemetry(instruments.server_session_duration, on_close=self.tasks.session_ended)

    def parent(self, params: Any) -> Context | None:
        return parent_context(params)

    def open(
        self, method: str, params: Any, request_id: object, network_transport: str | None, *, checked: bool = False
    ) -> RequestRecord | None:
        record = super().open(method, params, request_id, network_transport, checked=checked)
        if record is not None and record.task_id is not None:
            record.on_result = self.tasks.answered
        return record

    def cancel_received(
        self, params: Any, request_id: object, reason: str | None, cancelled: RequestRecord | None
    ) -> None:
        """One span for a `notifications/cancelled`, in flight or not, linked to the span of the request it
        cancels where that request is still in flight, and naming its id (links are dropped by some stores)."""
        if not is_instrumentation_enabled():
            return
        with contained("recording a cancel notification"):
            attributes: dict[str, Any] = {MCP_METHOD_NAME: NOTIFICATIONS_CANCELLED}
            if request_id is not None:
                attributes[JSONRPC_REQUEST_ID] = bounded(str(request_id))
            if reason is not None:
                attributes[MCP_CANCEL_REASON] = reason
            links = [Link(cancelled.span.get_span_context())] if cancelled is not None else []
            self._tracer.start_span(
                NOTIFICATIONS_CANCELLED,
                context=parent_context(params),
                kind=SpanKind.SERVER,
                attributes=attributes,
                links=links,
            ).end()

    def knows_method(self, method: str) -> bool:
        return method in KNOWN_METHODS  # a peer's invented method is _OTHER unless the server serves it

    def resolve(self, record: RequestRecord) -> None:
        if not record.method_known and record.server is not None:
            record.method_known = tool_registry.serves_method(record.server, record.method)
        tool = _tool(record)
        if tool is not None and not record.tool_registered and record.server is not None:
            # A framework's registry speaks for a call cancelled before the framework ran its tool, and for one
            # it handed to a task engine; a call that got as far as failing was told by the framework itself
            # whether it knew the name.
            record.tool_registered = tool_registry.is_registered(record.server, tool)
            if not record.tool_registered and (record.cancelled or record.task_id is not None):
                for registry in self.registries:
                    found = registry(record.server, tool)
                    if found is not None:  # its annotations give a ghost (of its task) its risk
                        record.tool_registered = True
                        record.registered_annotations = getattr(found, "annotations", None)
                        break

    def annotate(self, record: RequestRecord, verdict: Verdict) -> None:
        try:
            note_request(record.in_session, record.protocol_version, record.network_transport, record.http_version)
        except Exception:
            fault("telling a session about its request")
        tool = _tool(record)
        risk = None
        if verdict.ghost_handler_outcome is not None:
            risk = self.mark_ghost(record, record.span, verdict.ghost_handler_outcome)
        if tool is not None and record.session is not None:
            try:
                self._match_retry(record, tool)  # before this ghost is remembered: it retries no other
            except Exception:
                fault("matching a retry")
        if record.write_interrupted:
            record.span.add_event(EVENT_RESPONSE_WRITE_INTERRUPTED)
        if verdict.ghost_handler_outcome is not None and risk is not None:
            with contained("reporting a ghost"):
                self.report_ghost(record, verdict.ghost_handler_outcome, risk, record.span)
        try:
            self.tasks.observe(record, verdict)
        except Exception:
            fault("following a task")

    def ghost(self, record: RequestRecord, span: Span, handler_outcome: str, why: str) -> None:
        """A ghost of `record`'s call found after it was concluded (a task's): marked on `span` and reported."""
        risk = self.mark_ghost(record, span, handler_outcome)
        with contained("reporting a ghost"):
            self.report_ghost(record, handler_outcome, risk, span, why)

    def mark_ghost(self, record: RequestRecord, span: Span, handler_outcome: str) -> str:
        """Put a ghost of `record`'s call on `span` (its own, or its task's); returns the ghost's risk."""
        risk = GHOST_RISK_UNKNOWN
        with contained("judging a ghost's risk"):
            risk = self._risk(record, _tool(record))
        # Attributes as well as the event: many stores and spanmetrics index attributes only.
        ghost = {TOOL_HANDLER_OUTCOME: handler_outcome, TOOL_GHOST_RISK: risk}
        span.set_attributes(ghost)
        span.add_event(EVENT_GHOST_SUPPRESSED, ghost)
        return risk

    def _match_retry(self, record: RequestRecord, tool: str) -> None:
        retried = self._retries.find(record.session, tool, tool_arguments(record.params))
        if retried is not None:
            record.span.add_link(retried.span_context)
            record.span.set_attribute(TOOL_RETRIED_GHOST_RISK, retried.risk)
            record.span.add_event(EVENT_GHOST_RETRIED, {TOOL_GHOST_RISK: retried.risk})
            attributes = self.metric_attributes(record, keys=_RETRY_METRIC_KEYS)
            self._instruments.server_ghost_retries.add(1, {**attributes, TOOL_GHOST_RISK: retried.risk})

    def _risk(self, record: RequestRecord, tool: str | None) -> str:
        annotations = camel_case(record.registered_annotations)
        if annotations is None and record.server is not None:
            annotations = tool_registry.listed_annotations(record.server, tool)
        return ghost_risk(record.method, annotations)

    def report_ghost(
        self, record: RequestRecord, handler_outcome: str, risk: str, span: Span, why: str = "the caller cancelled"
    ) -> None:
        """Count a ghost of `record`'s call, log it in the context of `span` (where it is marked) and remember
        it there for retries."""
        tool = _tool(record)
        attributes = self.metric_attributes(record, keys=_GHOST_METRIC_KEYS)
        attributes.update({TOOL_HANDLER_OUTCOME: handler_outcome, TOOL_GHOST_RISK: risk})
        self._instruments.server_ghost_responses.add(1, attributes)
        facts = dict(attributes)  # method, tool, handler outcome, risk: bounded, as on the counter
        if record.request_id is not None:
            facts[JSONRPC_REQUEST_ID] = bounded(str(record.request_id))
        if record.task_id is not None:
            facts[MCP_TASK_ID] = record.task_id
        # Logged in the ghost span's context: an OTLP log record carries its trace and span ids.
        with trace.use_span(span, record_exception=False, set_status_on_exception=False):
            logger.warning(
                "%s: %s answer of %s%s (request id %r%s, ghost risk %s) was suppressed because %s; "
                "its side effects happened",
                GHOST_LOG_PREFIX,
                handler_outcome,
                record.method,
                f" tool {tool!r}" if tool is not None else "",
                record.request_id,
                f", task {record.task_id}" if record.task_id is not None else "",
                risk,
                why,
                extra=facts,  # the facts as log attributes, besides the message
            )
        LEDGER.record(tool, risk)
        if tool is not None and record.session is not None:
            arguments = tool_arguments(record.params)
            self._retries.remember(record.session, tool, arguments, span.get_span_context(), risk)


def _tool(record: RequestRecord) -> str | None:
    return record.target if record.method == TOOLS_CALL else None


_GHOST_METRIC_KEYS = frozenset({MCP_METHOD_NAME, GEN_AI_TOOL_NAME})
_RETRY_METRIC_KEYS = frozenset({GEN_AI_TOOL_NAME})
