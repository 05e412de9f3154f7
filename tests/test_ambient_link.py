"""A server span parented by the trace context its request carried in `_meta` links to the context the server
served it in, when there is one and it is not that parent itself (an HTTP server instrumentation's span), as
MCP's semantic conventions ask. Here an ASGI middleware makes that span around each stateless streamable HTTP
request, as opentelemetry-instrumentation-asgi does; without it, the server span has no link."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import TRACER_PROVIDER, Captured
from tests.in_process import http_app, served_over_http
from tests.sdk_client import sdk_client
from tests.servers import Gates, notes_server
from tests.subprocess_servers import http_streams

pytestmark = pytest.mark.anyio
HTTP_SPAN = "POST /mcp"


def with_http_spans(app: Any) -> Any:
    """`app`, each HTTP request served under a span of its own, current while it is served."""
    tracer = TRACER_PROVIDER.get_tracer("an HTTP server instrumentation")

    async def traced(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        with tracer.start_as_current_span(f"{scope['method']} {scope['path']}"):
            return await app(scope, receive, send)
    return traced


@pytest.mark.parametrize("http_spans", [True, False], ids=["an HTTP span", "none"])
async def test_a_server_span_parented_by_meta_links_to_the_http_span_it_was_served_in(
    captured: Captured, http_spans: bool
) -> None:
    app = http_app(notes_server(Gates()), stateless=True)
    async with served_over_http(with_http_spans(app) if http_spans else app, "/mcp") as url:
        async with sdk_client(http_streams(url)) as client:
            await client.call_tool("echo", {"text": "hi"})
    client_span, server_span = captured.client_and_server("tools/call echo")
    assert server_span.parent.span_id == client_span.context.span_id  # parented by `_meta`
    by_id = {span.context.span_id: span for span in captured.spans.get_finished_spans() if span.name == HTTP_SPAN}
    if http_spans:  # the link is to the HTTP request that carried the call: its span encloses the server's
        (link,) = server_span.links
        http_span = by_id[link.context.span_id]
        assert http_span.start_time <= server_span.start_time and server_span.end_time <= http_span.end_time
    else:
        assert by_id == {} and list(server_span.links) == []
