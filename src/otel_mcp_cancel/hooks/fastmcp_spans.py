"""FastMCP's own spans of a request, and ours: one SERVER and one CLIENT span per request, with our verdict.

Server side: FastMCP's SERVER span is ours, lent, carrying FastMCP's details too.

FastMCP 3.x and 4.x open a SERVER span of their own for each request (4.x at its middleware seam, 3.x around
the tool, resource or prompt). Under our span it would be a second SERVER span per request: counted twice by
spanmetrics, and blind to cancels and ghosts. When FastMCP asks its tracer for the SERVER span of the request
our span already covers, it gets ours instead, behind `LentSpan`: FastMCP's own attributes (`fastmcp.*`,
`enduser.*`, `mcp.session.id`), its exceptions (as our one bounded exception event) and the spans it starts
under it all land on our span, while the name, status, end and the attributes we own stay ours. Any other span
FastMCP starts (a nested call's, a mounted server's) is its own, as before.

Client side: FastMCP's CLIENT span becomes the request's span, held.

`fastmcp.Client` opens a CLIENT span before it sends the request it is for, and ends it after. Our tracer
starts that span (`HeldClientSpan`); the first request of the method it names, sent under it, takes it as its
own span (`serving.WaitingSpan`): FastMCP's attributes and exception stay on it, the name, status
and the attributes we own are ours, and it ends when FastMCP's block does. A span under which no such
request is sent (a listing served from FastMCP's cache, `client_span()` around other code) stays as FastMCP
made it.

Both: FastMCP's other spans come from the tracer provider given to `instrument()`, if one was, so a trace
is not split between two pipelines.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util import types

from otel_mcp_cancel.attributes import exception_attributes
from otel_mcp_cancel.conventions import EVENT_EXCEPTION, MCP_METHOD_NAME
from otel_mcp_cancel.conventions import REQUEST_SPAN_ATTRIBUTES as OURS
from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.request_state import RequestRecord, current_record
from otel_mcp_cancel.serving import WaitingSpan

FASTMCP_SCOPE = "fastmcp"  # the instrumentation scope FastMCP's tracer has


class _SeenByFastMCP(Span):
    """A request's span as FastMCP's code holds it: what it records of an exception is decided per kind."""

    _span: Span

    def get_span_context(self) -> trace.SpanContext:
        return self._span.get_span_context()

    def is_recording(self) -> bool:
        return self._span.is_recording()

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        self._exception(exception, attributes, timestamp, escaped)

    def _exception(
        self, exception: BaseException, attributes: types.Attributes, timestamp: int | None, escaped: bool
    ) -> None:
        raise NotImplementedError


class LentSpan(_SeenByFastMCP):
    """Our request span as FastMCP sees it: it writes its details; the verdict stays ours."""

    def __init__(self, record: RequestRecord) -> None:
        self._record = record
        self._span = record.span
        self._other_request = False

    def _for_this_request(self, method: object) -> bool:
        # On mcp 1.x the SDK may run its own tools/list inside a tools/call (checking a tool's output) and
        # FastMCP 3.x opens its span for it: that listing's details are not this request's.
        if method is not None and method != self._record.method:
            self._other_request = True
        return not self._other_request

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        if self._for_this_request(attributes.get(MCP_METHOD_NAME)):
            self._span.set_attributes({key: value for key, value in attributes.items() if key not in OURS})

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        if self._for_this_request(value if key == MCP_METHOD_NAME else None) and key not in OURS:
            self._span.set_attribute(key, value)

    def add_event(self, name: str, attributes: types.Attributes = None, timestamp: int | None = None) -> None:
        if not self._other_request:
            self._span.add_event(name, attributes, timestamp)

    def add_link(self, context: trace.SpanContext, attributes: types.Attributes = None) -> None:
        if not self._other_request:
            self._span.add_link(context, attributes)

    def _exception(
        self, exception: BaseException, attributes: types.Attributes, timestamp: int | None, escaped: bool
    ) -> None:
        # One exception event per request, bounded and with its message only on opt-in: ours, from this.
        if not self._other_request:
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
    record = current_record.get()()
    if kind is SpanKind.SERVER and record is not None and trace.get_current_span() is record.span:
        return LentSpan(record)
    return None


class HeldClientSpan(_SeenByFastMCP, WaitingSpan):
    """FastMCP's CLIENT span, started by our tracer: FastMCP's as it made it until a request of the method it
    names takes it; from then on FastMCP writes its details and the verdict is ours."""

    def __init__(self, span: Span) -> None:
        self._span = span
        self._method: object = None  # the first mcp.method.name FastMCP wrote
        self._record: RequestRecord | None = None
        self._capture_content = False
        self._exception_recorded = False

    def claim(self, method: str) -> Span | None:
        return self._span if self._record is None and method == self._method else None

    def claimed_by(self, record: RequestRecord, capture_content: bool) -> None:
        self._record, self._capture_content = record, capture_content

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        if self._method is None:
            self._method = attributes.get(MCP_METHOD_NAME)
        if self._record is not None:
            attributes = {key: value for key, value in attributes.items() if key not in OURS}
        self._span.set_attributes(attributes)

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        self.set_attributes({key: value})

    def add_event(self, name: str, attributes: types.Attributes = None, timestamp: int | None = None) -> None:
        self._span.add_event(name, attributes, timestamp)

    def add_link(self, context: trace.SpanContext, attributes: types.Attributes = None) -> None:
        self._span.add_link(context, attributes)

    def _exception(
        self, exception: BaseException, attributes: types.Attributes, timestamp: int | None, escaped: bool
    ) -> None:
        if self._record is None:
            self._span.record_exception(exception, attributes, timestamp, escaped)
        elif not self._exception_recorded:  # one, bounded, its message only on opt-in: as on our server spans
            self._exception_recorded = True
            self._span.add_event(EVENT_EXCEPTION, exception_attributes(exception, self._capture_content))

    def update_name(self, name: str) -> None:
        if self._record is None:
            self._span.update_name(name)

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._record is None:
            self._span.set_status(status, description)

    def end(self, end_time: int | None = None) -> None:
        pass  # it ends as FastMCP's block does: `close`

    def close(self) -> None:
        self._span.end()


def fastmcp_tracer(tracer: trace.Tracer, ours: trace.Tracer, given: trace.Tracer | None) -> trace.Tracer:
    """The tracer FastMCP gets: FastMCP's scope from the provider given to instrument() (`given`), if any,
    and ours lending and holding; unless the user turned FastMCP's own spans off (it then hands out a no-op
    tracer): FastMCP writes nothing, on its spans or on ours."""
    if isinstance(tracer, trace.NoOpTracer):
        return tracer
    return FastMCPTracer(given if given is not None else tracer, ours)


class FastMCPTracer(trace.Tracer):
    """FastMCP's tracer, but for the request's SERVER span, which is ours, lent, and its CLIENT span, which
    our tracer starts and holds for the request it is sent for."""

    def __init__(self, tracer: trace.Tracer, ours: trace.Tracer) -> None:
        self._tracer = tracer
        self._ours = ours

    def start_span(self, *args: Any, **kwargs: Any) -> Span:
        return self._tracer.start_span(*args, **kwargs)

    @contextmanager
    def start_as_current_span(  # type: ignore[override]  # the API's own is a generator-based context manager too
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
        lent: LentSpan | None = None
        held: HeldClientSpan | None = None
        with contained("lending a span to FastMCP"):
            lent = span_to_lend(kind)
            if lent is not None and attributes:
                lent.set_attributes(attributes)
            if kind is SpanKind.CLIENT and is_instrumentation_enabled():
                held = HeldClientSpan(self._ours.start_span(name, context, kind, links=links, start_time=start_time))
                if attributes:
                    held.set_attributes(attributes)
        if held is not None:
            try:
                with trace.use_span(held, end_on_exit=False, record_exception=record_exception,
                                    set_status_on_exception=set_status_on_exception):
                    yield held
            finally:
                if end_on_exit:
                    held.close()
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
