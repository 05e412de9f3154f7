"""A transport failure is not a cancel. A streamable HTTP server that answers a call's POST with 403 or 500, or an
auth flow that raises, tears the client's session down, and the call in flight sees that as a cancellation; its
client span says `failed`, with an `error.type` that names the failure (the HTTP status, or the exception's
type), never `cancelled` by its caller. mcp 2.x turns an error status into a JSON-RPC error of its own
(-32603), which the span then names. A small HTTP server of the test's answers `initialize` and then fails."""

from __future__ import annotations

import importlib.metadata
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest
from opentelemetry.trace import SpanKind, StatusCode
from packaging.version import Version

from tests.frameworks import FASTMCP_MAJOR
from tests.support import MCP_MAJOR

pytestmark = pytest.mark.anyio


@contextmanager
def failing_server(status: int) -> Iterator[str]:
    """Answers `initialize` (JSON), accepts notifications (202), and answers every other request `status`."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if message.get("method") == "initialize":
                body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {
                    "protocolVersion": message["params"]["protocolVersion"], "capabilities": {},
                    "serverInfo": {"name": "failing", "version": "0"}}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(202 if "id" not in message else status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802 - no stream for server-initiated messages
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_DELETE = do_GET  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()


# The line's HTTP client library: httpx on mcp 1.x, its successor httpx2 on 2.x.
httpx = pytest.importorskip("httpx" if MCP_MAJOR == 1 else "httpx2")


class RaisingAuth(httpx.Auth):  # type: ignore[misc, name-defined]
    """An auth flow that fails, as an OAuth provider does when its token cannot be had."""

    def auth_flow(self, request: Any) -> Any:
        from mcp.client.auth import OAuthTokenError

        raise OAuthTokenError("the token endpoint refused the grant")
        yield request  # a generator, as httpx asks


@contextmanager
def http_client_streams(url: str, auth: Any = None) -> Iterator[Any]:
    """The line's streamable HTTP client transport (its http client carrying `auth`)."""
    if MCP_MAJOR == 1:
        from mcp.client.streamable_http import streamablehttp_client

        yield streamablehttp_client(url, auth=auth)
    else:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        yield streamable_http_client(url, http_client=create_mcp_http_client(auth=auth))


async def run_session(url: str, auth: Any = None, call: bool = True) -> list[BaseException]:
    """Initialize a ClientSession over the transport and call `echo`; what each step raised."""
    from mcp import ClientSession

    raised: list[BaseException] = []
    with http_client_streams(url, auth) as transport:
        try:
            with anyio.fail_after(10):
                async with transport as streams, ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    if call:
                        await session.call_tool("echo", {"text": "x"})
        except BaseException as exc:  # the session's teardown: an exception group, as the SDK raises it
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raised.append(exc)
    return raised


def client_span(captured: Any, name: str) -> Any:
    (span,) = [span for span in captured.of_kind(SpanKind.CLIENT) if span.name == name]
    return span


@pytest.mark.parametrize("status", [403, 500])
async def test_a_call_whose_post_the_server_refuses_failed_with_the_status(captured, status: int) -> None:
    with failing_server(status) as url:
        raised = await run_session(url)
    assert raised  # the SDK's own behaviour, untouched: the session ends in error
    span = client_span(captured, "tools/call echo")
    error_type = str(status) if MCP_MAJOR == 1 else "-32603"
    assert (span.attributes["tool.outcome"], span.attributes["error.type"]) == ("failed", error_type)
    assert "tool.cancel_reason" not in span.attributes
    assert span.status.status_code is StatusCode.ERROR
    (point,) = [point for point in captured.points("mcp.client.operation.duration")
                if point.attributes.get("gen_ai.tool.name") == "echo"]
    assert (point.attributes["tool.outcome"], point.attributes["error.type"], point.count) == (
        "failed", error_type, 1)


# The SDK's own OAuth error, by its fully qualified type: a module of its own since mcp 1.13.
OAUTH_TOKEN_ERROR = "mcp.client.auth.OAuthTokenError" if Version(importlib.metadata.version("mcp")) < Version(
    "1.13") else "mcp.client.auth.exceptions.OAuthTokenError"


async def test_an_initialize_whose_auth_flow_raises_failed_with_the_exceptions_type(captured) -> None:
    with failing_server(500) as url:
        raised = await run_session(url, auth=RaisingAuth(), call=False)
    assert raised
    span = client_span(captured, "initialize")
    assert (span.attributes["tool.outcome"] if "tool.outcome" in span.attributes else None) is None
    assert span.attributes["error.type"] == OAUTH_TOKEN_ERROR
    assert "tool.cancel_reason" not in span.attributes and span.status.status_code is StatusCode.ERROR
    (point,) = [point for point in captured.points("mcp.client.operation.duration")
                if point.attributes.get("mcp.method.name") == "initialize"]
    assert point.attributes["error.type"] == OAUTH_TOKEN_ERROR


@pytest.mark.skipif(FASTMCP_MAJOR is None or FASTMCP_MAJOR < 3,
                    reason="FastMCP's client over streamable HTTP: 3.x and 4.x")
async def test_fastmcps_client_whose_call_the_server_refuses_failed_with_the_status(captured) -> None:
    from fastmcp import Client

    with failing_server(403) as url:
        with pytest.raises(BaseException):  # noqa: B017 - whatever FastMCP's client raises, as it raises it
            with anyio.fail_after(10):
                async with Client(url) as client:
                    await client.call_tool("echo", {"text": "x"})
    error_type = "403" if MCP_MAJOR == 1 else "-32603"
    span = client_span(captured, "tools/call echo")
    assert (span.attributes["tool.outcome"], span.attributes["error.type"]) == ("failed", error_type)
    assert "tool.cancel_reason" not in span.attributes and span.status.status_code is StatusCode.ERROR
