"""Every name of mcp 2.x that the plugin reaches for besides the callables it wraps: what it imports, the private
attributes it reads, the locals it reads off the SDK's frames. Each serves the capabilities it names and is
probed as hooks apply (`reach`); nothing here imports mcp until then."""

from __future__ import annotations

from otel_mcp_cancel.hooks import asgi_servers
from otel_mcp_cancel.hooks.capabilities import (
    CANCELS_V2,
    CLIENT_REQUESTS,
    CLIENT_SESSION_IDS,
    CLIENT_SESSIONS,
    DIRECT_REQUESTS,
    HTTP_HANG_UPS,
    LATE_ANSWERS,
    SERVED_METHODS,
    SESSIONS,
    SINGLE_EXCHANGE,
    STDIO_DELIVERY,
    STDIO_HANG_UPS,
    STREAM_REQUESTS,
)
from otel_mcp_cancel.hooks.reach import Attribute, Local, Name, Reach

# Who drives a dispatcher: a server's are driven by the runner's callbacks, a client's are not.
ServerRunner = Name((STREAM_REQUESTS, CANCELS_V2, DIRECT_REQUESTS), "mcp.server.runner", "ServerRunner")
coerce_request_id = Name(CANCELS_V2, "mcp.shared.dispatcher", "coerce_request_id")
cancelled_request_id_from_params = Name(CANCELS_V2, "mcp.shared.jsonrpc_dispatcher",
                                        "cancelled_request_id_from_params")
# A request on the single-exchange HTTP entry (no hook outside the runner sees it), and what that entry answers a
# raising handler with.
SingleExchangeDispatchContext = Name(SINGLE_EXCHANGE, "mcp.server._streamable_http_modern",
                                     "_SingleExchangeDispatchContext")
handler_exception_to_error_data = Name(SINGLE_EXCHANGE, "mcp.shared.jsonrpc_dispatcher",
                                       "handler_exception_to_error_data")
MCPError = Name((DIRECT_REQUESTS, CLIENT_REQUESTS), "mcp.shared.exceptions", "MCPError")
ErrorData = Name(LATE_ANSWERS, "mcp_types", "ErrorData")
INTERNAL_ERROR = Name(SINGLE_EXCHANGE, "mcp_types", "INTERNAL_ERROR")
REQUEST_TIMEOUT = Name((DIRECT_REQUESTS, CLIENT_REQUESTS), "mcp_types", "REQUEST_TIMEOUT")

_Dispatcher = Name((), "mcp.shared.jsonrpc_dispatcher", "JSONRPCDispatcher")
dispatcher_read_stream = Attribute((STREAM_REQUESTS, SESSIONS), _Dispatcher, "_read_stream")
dispatcher_write_stream = Attribute((CLIENT_SESSIONS, LATE_ANSWERS, HTTP_HANG_UPS), _Dispatcher, "_write_stream")
in_flight = Attribute(CANCELS_V2, _Dispatcher, "_in_flight")
direct_on_request = Attribute(DIRECT_REQUESTS, Name((), "mcp.shared.direct_dispatcher", "DirectDispatcher"),
                              "_on_request")
client_dispatcher = Attribute((CLIENT_SESSIONS, LATE_ANSWERS), Name((), "mcp.client.session", "ClientSession"),
                              "_dispatcher")
request_handlers = Attribute(SERVED_METHODS, Name((), "mcp.server.lowlevel.server", "Server"), "_request_handlers")

_HttpTransport = Name((), "mcp.server.streamable_http", "StreamableHTTPServerTransport")
http_request_streams = Attribute(HTTP_HANG_UPS, _HttpTransport, "_request_streams")
http_event_store = Attribute(HTTP_HANG_UPS, _HttpTransport, "_event_store")
http_write_stream = Attribute(HTTP_HANG_UPS, _HttpTransport, "_write_stream")

# The stdout the entered `stdio_server` writes to: a local of its suspended generator.
stdio_stdout = Local(STDIO_DELIVERY, Name((), "mcp.server.stdio", "stdio_server"), "stdout")
# And the stdin it reads (mcp 2.x serves from a private duplicate of fd 0, which it points at /dev/null).
stdio_stdin = Local(STDIO_HANG_UPS, Name((), "mcp.server.stdio", "stdio_server"), "stdin")
# The transport a streamable HTTP client's helper holds its session id on: a local of its suspended generator.
http_client_transport = Local(CLIENT_SESSION_IDS, Name((), "mcp.client.streamable_http", "streamable_http_client"),
                              "transport")

SERVER: list[Reach] = [ServerRunner, coerce_request_id, cancelled_request_id_from_params,
                       SingleExchangeDispatchContext, handler_exception_to_error_data, MCPError, INTERNAL_ERROR,
                       REQUEST_TIMEOUT, dispatcher_read_stream, in_flight, direct_on_request, request_handlers,
                       http_request_streams, http_event_store, http_write_stream, dispatcher_write_stream, stdio_stdout,
                       stdio_stdin, *asgi_servers.SERVERS]
CLIENT: list[Reach] = [MCPError, REQUEST_TIMEOUT, ErrorData, dispatcher_write_stream, client_dispatcher,
                       http_client_transport]

# The stream a server session (a request's `session`) writes its answers to.
session_write_stream = dispatcher_write_stream
