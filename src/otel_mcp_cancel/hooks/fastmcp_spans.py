"""FastMCP's own spans of a request, and ours: one SERVER and one CLIENT span per request, with our verdict.

Server side: FastMCP's SERVER span is ours, lent, carrying FastMCP's details too.

FastMCP 3.x and 4.x open a SERVER span of their own for each request (4.x at its middleware seam, 3.x around
the tool, resource or prompt). Under our span it would be a second SERVER span per request: counted twice by
spanmetrics, and blind to cancels and ghosts. When FastMCP asks its tracer for the SERVER span of the request
our span already covers, it gets ours instead, behind `LentSpan`: FastMCP's own attributes (`fastmcp.*`,
`enduser.*`, `mcp.session.id`), its exceptions (as our one bounded exception event) and the spans it starts
under it all land on our span, while the name, status, end and the attributes we own stay ours. Any other span
FastMCP starts (a nested call's, a mounted server's) is its own, as before.

Client side: `fastmcp.Client` opens a CLIENT span around the SDK's request, in which ours opens; it cannot
tell a timeout from a failure, and it ends after ours, so it cannot carry our verdict. It steps aside (as the
SDK's own client span does on mcp 2.x): ours is the request's one CLIENT span.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util import types

from otel_mcp_cancel.conventions import REQUEST_SPAN_ATTRIBUTES as OURS
from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.request_state import RequestRecord, current_record


class LentSpan(Span):
    """Our request span as FastMCP sees it: it writes its details; the verdict stays ours."""

    def __init__(self, record: RequestRecord) -> None:
        self._record = record
        self._span = record.span

    def get_span_context(self) -> trace.SpanContext:
        return self._span.get_span_context()

    def is_recording(self) -> bool:
        return self._span.is_recording()

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        self._span.set_attributes({key: value for key, value in attributes.items() if key not in OURS})

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        if key not in OURS:
            self._span.set_attribute(key, value)

    def add_event(self, name: str, attributes: types.Attributes = None, timestamp: int | None = None) -> None:
        self._span.add_event(name, attributes, timestamp)

    def add_link(self, context: trace.SpanContext, attributes: types.Attributes = None) -> None:
        self._span.add_link(context, attributes)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        # One exception event per request, bounded and with its message only on opt-in: ours, from this.
        self._record.note_exception(exception)

    # Ours to decide: the span is named and given its status when the request's outcome is known, and
    # it ends when the request does.
    def update_name(self, name: str) -> None:
        pass

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        pass

    def end(self, end_time: int | None = None) -> None:
        pass


def span_to_lend(kind: SpanKind) -> LentSpan | None:
    """Our span, if FastMCP is about to open the SERVER span of the request it covers (and not yet did)."""
    record = current_record.get()
    if kind is SpanKind.SERVER and record is not None and trace.get_current_span() is record.span:
        return LentSpan(record)
    return None


def steps_aside(kind: SpanKind) -> bool:
    """FastMCP's client is about to open a CLIENT span around a request whose span we open ourselves."""
    return kind is SpanKind.CLIENT and is_instrumentation_enabled()


def fastmcp_tracer(tracer: trace.Tracer) -> trace.Tracer:
    """The tracer FastMCP gets: ours lending and stepping aside, unless the user turned FastMCP's own
    spans off (it then hands out a no-op tracer): FastMCP writes nothing, on its spans or on ours."""
    return tracer if isinstance(tracer, trace.NoOpTracer) else FastMCPTracer(tracer)


class FastMCPTracer(trace.Tracer):
    """FastMCP's tracer, but for the request's SERVER span, which is ours, lent, and its CLIENT span, which
    steps aside for ours."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    def start_span(self, *args: Any, **kwargs: Any) -> Span:
        return self._tracer.start_span(*args, **kwargs)

    @contextmanager
    def start_as_current_span(
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Span]:
        lent, aside = None, False
        with contained("lending a span to FastMCP"):
            lent, aside = span_to_lend(kind), steps_aside(kind)
            if lent is not None and attributes:
                lent.set_attributes(attributes)
        if aside:
            yield trace.NonRecordingSpan(trace.get_current_span().get_span_context())
            return
        if lent is None:
            with self._tracer.start_as_current_span(
                name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception,
                end_on_exit,
            ) as span:
                yield span
            return
        with trace.use_span(lent, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield lent
