"""A request while it is served or sent: its record and span current (`Serving`), and the span it starts from:
its own, with a link to the ambient context where its peer's trace context parents it, or one another
instrumentation opened for it (`WaitingSpan`)."""

from __future__ import annotations

import weakref
from typing import Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span

from otel_mcp_cancel.faults import fault
from otel_mcp_cancel.request_state import EARLY_CLAIMS, CurrentRecord, RequestRecord


class Side(Protocol):
    """What serving a request asks of its side (`request_telemetry.RequestTelemetry`)."""

    role: str
    current: CurrentRecord
    records_current: bool
    stopped: bool

    def conclude(self, record: RequestRecord) -> bool: ...

    def conclude_later(self, record: RequestRecord) -> None: ...

    def handler_ended_late(self, record: RequestRecord) -> None: ...


class Serving:
    """While a request runs: its record and its span are current; as it ends, it is concluded in the span's
    context (the ghost WARNING and the metrics' exemplars point at it). A class, not a generator-based
    context manager: it runs on every request."""

    __slots__ = ("_telemetry", "_record", "_record_token", "_context_token")

    def __init__(self, telemetry: Side, record: RequestRecord) -> None:
        self._telemetry, self._record = telemetry, record

    def __enter__(self) -> RequestRecord:
        record, telemetry = self._record, self._telemetry
        self._record_token = telemetry.current.set(weakref.ref(record)) if telemetry.records_current else None
        self._context_token = otel_context.attach(trace.set_span_in_context(record.span))
        return record

    def __exit__(self, *exc_info: object) -> None:
        telemetry, record = self._telemetry, self._record
        ended = False
        try:
            if record.wire is not None:  # a hang-up seen off the event loop may be concluding it
                with EARLY_CLAIMS:
                    record.concluding = not record.concluded_early
            if record.concluded_early:  # its caller left while it ran: concluded then
                ended = True
                telemetry.handler_ended_late(record)
            # In flight across uninstrument(), its answer unseen: no verdict rather than a wrong one.
            elif not telemetry.stopped or record.answer is not None or record.cancelled:
                if record.wire is not None and _held_by_wire(telemetry, record):
                    ended = True  # its stdout concludes it once its answer's line is written, or fails to be
                else:
                    ended = telemetry.conclude(record)
        finally:
            if not ended:  # whatever failed above, the span still ends
                end_span(telemetry, record)
            otel_context.detach(self._context_token)
            if self._record_token is not None:
                telemetry.current.reset(self._record_token)


def ambient_link(parent: Context) -> list[Link] | None:
    """A span parented by the trace context a request carried (`parent`) links to the context it was served in,
    if any and not that parent itself (an HTTP server's span, say), as MCP's conventions ask."""
    ambient = trace.get_current_span().get_span_context()
    if not ambient.is_valid or ambient.span_id == trace.get_current_span(parent).get_span_context().span_id:
        return None
    return [Link(ambient)]


def end_span(telemetry: Side, record: RequestRecord) -> None:
    """End the span of a request whose conclusion failed, if it is ours to end."""
    if record.ends_span:
        try:
            record.span.end()
        except Exception:
            fault(f"ending a {telemetry.role} span")


def _held_by_wire(telemetry: Side, record: RequestRecord) -> bool:
    wire = record.wire
    try:
        return wire is not None and wire.holds(record, telemetry.conclude_later)
    except Exception:
        fault("following an answer to stdout")
        return False


class WaitingSpan(Span):
    """A span another instrumentation opened around a request about to be sent (FastMCP's client span),
    offered to be that request's span: it then carries our verdict, and its holder ends it."""

    def claim(self, method: str) -> Span | None:
        """The span a request of `method` is to take as its own, or None: it starts its own."""
        raise NotImplementedError

    def claimed_by(self, record: RequestRecord, capture_content: bool) -> None:
        """The request that took it, with whether exception messages may be recorded."""
        raise NotImplementedError
