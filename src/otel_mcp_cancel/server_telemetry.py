"""Turns a server request's record into its span, metrics, ghost log line and ghost totals.

Every entry point here is contained: a failure in telemetry is logged once per
kind and never reaches the MCP server.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.propagate import extract
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from otel_mcp_cancel import tool_registry
from otel_mcp_cancel.attributes import (
    metric_attributes,
    request_attributes,
    span_name,
    target_name,
    verdict_attributes,
)
from otel_mcp_cancel.conventions import (
    EVENT_GHOST_RETRIED,
    EVENT_GHOST_SUPPRESSED,
    EVENT_REQUEST_CANCELLED,
    EVENT_RESPONSE_WRITE_INTERRUPTED,
    GEN_AI_TOOL_NAME,
    GHOST_LOG_PREFIX,
    MCP_CANCEL_REASON,
    MCP_METHOD_NAME,
    MCP_PROTOCOL_VERSION,
    OUTCOME_CANCELLED,
    TOOL_GHOST_RISK,
    TOOL_HANDLER_OUTCOME,
    TOOLS_CALL,
)
from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.ghosts import LEDGER
from otel_mcp_cancel.instruments import Instruments
from otel_mcp_cancel.outcome import Verdict, classify, ghost_risk
from otel_mcp_cancel.request_state import RequestRecord, current_record
from otel_mcp_cancel.retries import Ghost, GhostRetries

logger = logging.getLogger("otel_mcp_cancel")


def parent_context(params: Any) -> Context | None:
    """The trace context a client put in `params._meta`, or None to parent on the ambient context."""
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    if not isinstance(meta, Mapping) or "traceparent" not in meta:
        return None
    ctx = extract(meta)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


class ServerTelemetry:
    def __init__(
        self, tracer: Tracer, instruments: Instruments, retries: GhostRetries, *, cancelled_is_error: bool
    ) -> None:
        self._tracer = tracer
        self._instruments = instruments
        self._retries = retries
        self._cancelled_is_error = cancelled_is_error

    def open(self, method: str, params: Any, request_id: object, network_transport: str | None) -> RequestRecord | None:
        """Start the SERVER span for an inbound request; None when instrumentation is suppressed or fails."""
        if not is_instrumentation_enabled():
            return None
        with contained("opening a server span"):
            span = self._tracer.start_span(
                method,
                context=parent_context(params),
                kind=SpanKind.SERVER,
                attributes=request_attributes(method, params, request_id, network_transport),
            )
            return RequestRecord(method, params, request_id, network_transport, span)
        return None

    @contextmanager
    def serving(self, record: RequestRecord) -> Iterator[RequestRecord]:
        """Make the record and its span current while the request is served, then finish it."""
        record_token = current_record.set(record)
        context_token = otel_context.attach(trace.set_span_in_context(record.span))
        try:
            yield record
        finally:
            otel_context.detach(context_token)
            current_record.reset(record_token)
            self.finish(record)

    def finish(self, record: RequestRecord) -> None:
        try:
            with contained("finishing a server span"):
                tool = target_name(record.params) if record.method == TOOLS_CALL else None
                if tool is not None and not record.tool_registered and record.server is not None:
                    record.tool_registered = tool_registry.is_registered(record.server, tool)
                verdict = classify(
                    record.handler, record.answer, record.cancelled, cancelled_is_error=self._cancelled_is_error
                )
                risk = self._risk(record, tool) if verdict.is_ghost else None
                retried = self._retried_ghost(record, tool)
                self._end_span(record, verdict, risk, retried)
                self._record_metrics(record, verdict)
                if retried is not None:
                    attributes = self._base_metric_attributes(record, keys=_RETRY_METRIC_KEYS)
                    self._instruments.server_ghost_retries.add(1, {**attributes, TOOL_GHOST_RISK: retried.risk})
                if risk is not None:
                    self._report_ghost(record, verdict, tool, risk)
        finally:
            if record.span.is_recording():  # whatever failed above, the span still ends
                with contained("ending a server span"):
                    record.span.end()

    def _retried_ghost(self, record: RequestRecord, tool: str | None) -> Ghost | None:
        if tool is None or record.session is None:
            return None
        return self._retries.find(record.session, tool, _arguments(record))

    def _risk(self, record: RequestRecord, tool: str | None) -> str:
        annotations = record.tool_annotations
        if annotations is None and record.server is not None:
            annotations = tool_registry.listed_annotations(record.server, tool)
        return ghost_risk(record.method, annotations)

    def _end_span(self, record: RequestRecord, verdict: Verdict, risk: str | None, retried: Ghost | None) -> None:
        span = record.span
        target = target_name(record.params)
        fold = record.method == TOOLS_CALL and not record.tool_registered
        span.update_name(span_name(record.method, target, target_registered=not fold))
        if record.protocol_version is not None:
            span.set_attribute(MCP_PROTOCOL_VERSION, record.protocol_version)
        span.set_attributes(verdict_attributes(record.method, verdict))
        if verdict.outcome == OUTCOME_CANCELLED:
            reason = {MCP_CANCEL_REASON: record.cancel_reason} if record.cancel_reason is not None else {}
            span.add_event(EVENT_REQUEST_CANCELLED, reason, timestamp=record.cancel_time_ns)
        if risk is not None:
            ghost = {TOOL_HANDLER_OUTCOME: verdict.ghost_handler_outcome, TOOL_GHOST_RISK: risk}
            span.add_event(EVENT_GHOST_SUPPRESSED, ghost)
        if retried is not None:
            span.add_link(retried.span_context)
            span.add_event(EVENT_GHOST_RETRIED, {TOOL_GHOST_RISK: retried.risk})
        if record.write_interrupted:
            span.add_event(EVENT_RESPONSE_WRITE_INTERRUPTED)
        if verdict.span_error:
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    def _base_metric_attributes(self, record: RequestRecord, keys: frozenset[str] | None = None) -> dict[str, Any]:
        attributes = metric_attributes(
            record.method,
            target_name(record.params),
            record.tool_registered,
            record.protocol_version,
            record.network_transport,
        )
        return attributes if keys is None else {key: value for key, value in attributes.items() if key in keys}

    def _record_metrics(self, record: RequestRecord, verdict: Verdict) -> None:
        attributes = self._base_metric_attributes(record)
        attributes.update(verdict_attributes(record.method, verdict))
        self._instruments.server_operation_duration.record(time.perf_counter() - record.started, attributes)

    def _report_ghost(self, record: RequestRecord, verdict: Verdict, tool: str | None, risk: str) -> None:
        attributes = self._base_metric_attributes(record, keys=_GHOST_METRIC_KEYS)
        attributes.update({TOOL_HANDLER_OUTCOME: verdict.ghost_handler_outcome, TOOL_GHOST_RISK: risk})
        self._instruments.server_ghost_responses.add(1, attributes)
        logger.warning(
            "%s: %s answer of %s%s (request id %r, ghost risk %s) was suppressed because the caller cancelled; "
            "its side effects happened",
            GHOST_LOG_PREFIX,
            verdict.ghost_handler_outcome,
            record.method,
            f" tool {tool!r}" if tool is not None else "",
            record.request_id,
            risk,
        )
        LEDGER.record(tool, risk)
        if tool is not None and record.session is not None:
            self._retries.remember(record.session, tool, _arguments(record), record.span.get_span_context(), risk)


def _arguments(record: RequestRecord) -> Any:
    return record.params.get("arguments") if isinstance(record.params, Mapping) else None


_GHOST_METRIC_KEYS = frozenset({MCP_METHOD_NAME, GEN_AI_TOOL_NAME})
_RETRY_METRIC_KEYS = frozenset({GEN_AI_TOOL_NAME})
