"""A server's ghosts, wherever they are found (a request's conclusion, a task's end, a late `tasks/cancel`):
marked on the span that carries them with their risk, counted, logged as a WARNING in that span's context and
remembered for retries; and a retry of one matched to it. Request and task telemetry both report through here."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Tracer

from otel_mcp_cancel import tool_registry
from otel_mcp_cancel.attributes import bounded, camel_case, tool_arguments
from otel_mcp_cancel.conventions import (
    EVENT_GHOST_RETRIED,
    EVENT_GHOST_SUPPRESSED,
    GEN_AI_TOOL_NAME,
    GHOST_LOG_PREFIX,
    GHOST_RISK_UNKNOWN,
    JSONRPC_REQUEST_ID,
    MCP_METHOD_NAME,
    MCP_TASK_ID,
    TOOL_CALL_FINGERPRINT,
    TOOL_GHOST_KIND,
    TOOL_GHOST_RISK,
    TOOL_HANDLER_OUTCOME,
    TOOL_RETRIED_GHOST_RISK,
    TOOLS_CALL,
)
from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.ghosts import LEDGER
from otel_mcp_cancel.instruments import Instruments
from otel_mcp_cancel.outcome import ghost_risk
from otel_mcp_cancel.request_state import RequestRecord
from otel_mcp_cancel.retries import CallFingerprints, RecentCalls

logger = logging.getLogger("otel_mcp_cancel")

_GHOST_METRIC_KEYS = frozenset({MCP_METHOD_NAME, GEN_AI_TOOL_NAME})
_TOOL_KEYS = frozenset({GEN_AI_TOOL_NAME})


class GhostReporter:
    def __init__(self, tracer: Tracer, instruments: Instruments, retries: RecentCalls,
                 fingerprints: CallFingerprints | None = None) -> None:
        self._tracer = tracer
        self._instruments = instruments
        self.retries = retries
        self.fingerprints = fingerprints  # None: no key was given

    def fingerprint(self, record: RequestRecord, span: Span) -> None:
        """Put the call's fingerprint on `span` (its own, or its task's). Asked only when the replicas share a key
        (`fingerprints`)."""
        tool, fingerprints = called_tool(record), self.fingerprints
        if tool is not None and fingerprints is not None:
            span.set_attribute(TOOL_CALL_FINGERPRINT, fingerprints.of(tool, tool_arguments(record.params)))

    def ghost(self, record: RequestRecord, span: Span, handler_outcome: str, why: str) -> None:
        """A ghost of `record`'s call found after it was concluded (a task's): marked on `span` and reported."""
        risk = self.mark(record, span, handler_outcome)
        with contained("reporting a ghost"):
            self.report(record, handler_outcome, risk, span, why)

    def after_conclusion(self, record: RequestRecord, handler_outcome: str, why: str, kind: str) -> None:
        """A ghost of a request whose span had already ended (concluded as its caller left, its handler running
        on): marked on a span of its own, a child of the request's, that names the call and carries the ghost's
        attributes and event; reported (counted, its WARNING in that span's context) and remembered there. It
        has no `mcp.method.name` and no `tool.outcome`: it is not a second call, and is counted as none."""
        attributes: dict = _metric_attributes(record, _TOOL_KEYS)
        attributes[TOOL_GHOST_KIND] = kind
        if record.request_id is not None:
            attributes[JSONRPC_REQUEST_ID] = bounded(str(record.request_id))
        span = self._tracer.start_span(EVENT_GHOST_SUPPRESSED, context=trace.set_span_in_context(record.span),
                                       kind=SpanKind.INTERNAL, attributes=attributes)
        try:
            self.ghost(record, span, handler_outcome, why)
        finally:
            span.end()

    def mark(self, record: RequestRecord, span: Span, handler_outcome: str) -> str:
        """Put a ghost of `record`'s call on `span` (its own, or its task's); returns the ghost's risk."""
        risk = GHOST_RISK_UNKNOWN
        with contained("judging a ghost's risk"):
            risk = self._risk(record)
        # Attributes as well as the event: many stores and spanmetrics index attributes only.
        ghost = {TOOL_HANDLER_OUTCOME: handler_outcome, TOOL_GHOST_RISK: risk}
        span.set_attributes(ghost)
        span.add_event(EVENT_GHOST_SUPPRESSED, ghost)
        if span is not record.span and self.fingerprints is not None:  # a task's ghost: joined to retries elsewhere
            with contained("fingerprinting a call"):
                self.fingerprint(record, span)
        return risk

    def report(
        self, record: RequestRecord, handler_outcome: str, risk: str, span: Span, why: str = "the caller cancelled"
    ) -> None:
        """Count a ghost of `record`'s call, log it in the context of `span` (where it is marked) and remember
        it there for retries."""
        tool = called_tool(record)
        attributes = _metric_attributes(record, _GHOST_METRIC_KEYS)
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
            self.retries.remember(record.session, tool, arguments, span.get_span_context(), risk,
                                  record.span.get_span_context().span_id)

    def match_retry(self, record: RequestRecord) -> None:
        """Link `record`'s call to the ghost it repeats, if any (before its own ghost, if any, is remembered).
        Asked only while `retries` holds any."""
        tool = called_tool(record)
        if tool is None or record.session is None:
            return
        retried = self.retries.find(record.session, tool, tool_arguments(record.params))
        own = record.span.get_span_context().span_id  # 0 where nothing traces: no call can be told from another
        if retried is not None and (own == 0 or retried.call_span_id != own):
            record.span.add_link(retried.span_context)
            record.span.set_attribute(TOOL_RETRIED_GHOST_RISK, retried.label)
            record.span.add_event(EVENT_GHOST_RETRIED, {TOOL_RETRIED_GHOST_RISK: retried.label})
            attributes = _metric_attributes(record, _TOOL_KEYS)
            self._instruments.server_ghost_retries.add(1, {**attributes, TOOL_GHOST_RISK: retried.label})

    def _risk(self, record: RequestRecord) -> str:
        annotations: Mapping[str, Any] | None = camel_case(record.registered_annotations)
        if annotations is None and record.server is not None:
            annotations = tool_registry.listed_annotations(record.server, called_tool(record))
        return ghost_risk(record.method, annotations)


def called_tool(record: RequestRecord) -> str | None:
    return record.target if record.method == TOOLS_CALL else None


def _metric_attributes(record: RequestRecord, keys: frozenset[str]) -> dict:
    """A new dict of the request's shared metric attributes named in `keys`."""
    return {key: value for key, value in record.metric_attributes().items() if key in keys}
