"""The other instrumentations of MCP, as `hot_path.py` runs them beside the plugin: each turned on before a
block of calls and off after it, in the same process and interleaving, exporting through the same batch span
processor and OTLP/HTTP exporter (logfire through its own provider, with that processor added to it).

Over memory streams no transport is opened, so a peer that hooks transports (stdio, SSE, streamable HTTP)
would see nothing: its own transport wrapper is applied to the memory streams of both ends, as it applies it
to every transport a client or server opens. A peer with no way to undo what it patches (Traceloop's
`uninstrument()` leaves the session patched; logfire has none) gets its patched attributes put back after
each block, so no other mode runs with it.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any


class Patched:
    """The attributes a peer replaces, as they were, to put back."""

    def __init__(self, targets: tuple[tuple[str, str, str], ...]) -> None:
        self._targets = targets  # (module, owner ("" for the module itself), attribute)
        self._saved: list[tuple[Any, str, Any]] = []

    def save(self) -> None:
        self._saved = []
        for module_name, owner_name, attribute in self._targets:
            owner = importlib.import_module(module_name)
            owner = getattr(owner, owner_name) if owner_name else owner
            self._saved.append((owner, attribute, vars(owner)[attribute]))

    def restore(self) -> None:
        for owner, attribute, value in self._saved:
            setattr(owner, attribute, value)


class Peer:
    """One instrumentation: `on(tracer_provider, endpoint, spans)` before a block, `off()` after it;
    `transport(streams)` wraps a memory transport's streams as the peer wraps a transport's."""

    name = ""
    package = ""  # what must be installed (its PyPI name)
    module = ""  # what must import
    records = ""  # what it records for one tools/call, read off its source

    def unavailable(self, mcp_major: int) -> str | None:
        """Why it cannot run here (not installed, or not on this mcp line), or None."""
        if importlib.util.find_spec(self.module.split(".")[0]) is None or importlib.util.find_spec(self.module) is None:
            return f"{self.package} is not installed"
        return self.not_on_line(mcp_major)

    def not_on_line(self, mcp_major: int) -> str | None:
        """Why it does not run on this mcp line, or None."""
        return None

    def on(self, tracer_provider: Any, endpoint: str, spans: Any) -> None:
        raise NotImplementedError

    def off(self) -> None:
        raise NotImplementedError

    def transport(self, streams: Callable[[], Any]) -> Any:
        return streams()

    def flush(self) -> None:
        """Exports what it holds beyond the shared providers."""


class McpOwnSpans(Peer):
    name = "mcp's own spans"
    package = "mcp"
    module = "mcp"
    records = ("a CLIENT and a SERVER span per request, `error.type=tool_error` on an `isError` result; "
               "trace context in `_meta`; no metrics, no outcome of a cancel, no ghosts")

    def not_on_line(self, mcp_major: int) -> str | None:
        return "mcp 1.x has no spans of its own" if mcp_major < 2 else None

    def on(self, tracer_provider: Any, endpoint: str, spans: Any) -> None:
        # What setting the global tracer provider does for mcp's spans (its module tracer is a proxy to it),
        # for this block only: a global provider, once set, cannot be unset for the other modes.
        import mcp.shared._otel as sdk_otel

        self._proxy = sdk_otel._tracer
        sdk_otel._tracer = tracer_provider.get_tracer("mcp-python-sdk")

    def off(self) -> None:
        import mcp.shared._otel as sdk_otel

        sdk_otel._tracer = self._proxy


class Traceloop(Peer):
    name = "traceloop"
    package = "opentelemetry-instrumentation-mcp"
    module = "opentelemetry.instrumentation.mcp"
    records = ("a client span per tools/call (`<tool>.tool`) and a `ResponseStreamWriter` span per request or "
               "response a transport writes; trace context in `_meta`; no metrics, no server span (but on "
               "standalone FastMCP), no outcome of a cancel, no ghosts")
    _patched = Patched((
        ("mcp.shared.session", "BaseSession", "send_request"),
        ("mcp.server.session", "ServerSession", "__init__"),
        ("mcp.client.stdio", "", "stdio_client"),
        ("mcp.server.stdio", "", "stdio_server"),
    ))

    def not_on_line(self, mcp_major: int) -> str | None:
        if mcp_major >= 2:  # seen with 0.62.4: mcp 2 renamed the streamable HTTP client it wraps
            return "its instrument() raises on mcp 2.x (no `mcp.client.streamable_http.streamablehttp_client`)"
        return None

    def on(self, tracer_provider: Any, endpoint: str, spans: Any) -> None:
        from opentelemetry.instrumentation.mcp import McpInstrumentor
        from opentelemetry.instrumentation.mcp.version import __version__
        from opentelemetry.trace import get_tracer

        self._patched.save()
        self._instrumentor = McpInstrumentor()
        self._instrumentor.instrument(tracer_provider=tracer_provider)
        self._wrapper = self._instrumentor._transport_wrapper(
            get_tracer("opentelemetry.instrumentation.mcp.instrumentation", __version__, tracer_provider))

    def off(self) -> None:
        self._instrumentor.uninstrument()
        self._patched.restore()

    def transport(self, streams: Callable[[], Any]) -> Any:
        return self._wrapper(streams, None, (), {})


class OpenInference(Peer):
    name = "openinference"
    package = "openinference-instrumentation-mcp"
    module = "openinference.instrumentation.mcp"
    records = "no spans, no metrics: trace context in `_meta`, and the context a request carried made current"

    def not_on_line(self, mcp_major: int) -> str | None:
        if mcp_major >= 2:
            return "on mcp 2.x the SDK propagates the trace context itself, which is all this peer does"
        return None

    def on(self, tracer_provider: Any, endpoint: str, spans: Any) -> None:
        from openinference.instrumentation.mcp import MCPInstrumentor

        self._instrumentor = MCPInstrumentor()
        self._instrumentor.instrument()

    def off(self) -> None:
        self._instrumentor.uninstrument()

    def transport(self, streams: Callable[[], Any]) -> Any:
        from openinference.instrumentation.mcp import _wrap_plain_transport

        return _wrap_plain_transport(streams, None, (), {})


class Logfire(Peer):
    name = "logfire"
    package = "logfire"
    module = "logfire"
    records = ("a span per request on the client and one per request handled on the server, each with the "
               "request and its response as attributes (JSON); trace context in `_meta`; no metrics, no "
               "outcome of a cancel, no ghosts")
    _patched = Patched((
        ("mcp.shared.session", "BaseSession", "send_request"),
        ("mcp.shared.session", "BaseSession", "send_notification"),
        ("mcp.client.session", "ClientSession", "_received_notification"),
        ("mcp.client.session", "ClientSession", "_received_request"),
        ("mcp.server.lowlevel.server", "Server", "_handle_request"),
    ))
    _logfire: Any = None

    def not_on_line(self, mcp_major: int) -> str | None:
        if mcp_major >= 2:
            return "its instrument_mcp() does nothing on mcp 2.x (it says so): mcp's own spans are what it records"
        return None

    def on(self, tracer_provider: Any, endpoint: str, spans: Any) -> None:
        if self._logfire is None:  # its own provider, once per process, exporting as the others do
            import logfire
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            exporter = BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"))
            type(self)._logfire = logfire.configure(
                local=True, send_to_logfire=False, console=False, metrics=False, inspect_arguments=False,
                distributed_tracing=True,  # leaves the global propagator as it is, as for the other modes
                additional_span_processors=[exporter, spans])
        self._patched.save()
        self._logfire.instrument_mcp()

    def off(self) -> None:
        self._patched.restore()

    def flush(self) -> None:
        self._logfire.force_flush()


PEERS: tuple[Peer, ...] = (McpOwnSpans(), Traceloop(), OpenInference(), Logfire())


@asynccontextmanager
async def memory_transport(read: Any, write: Any) -> AsyncIterator[tuple[Any, Any]]:
    """A transport's streams, for a peer to wrap."""
    yield read, write
