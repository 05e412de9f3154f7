"""Every name of mcp 1.x that the plugin reaches for besides the callables it wraps: what it imports, the private
attributes it reads, the locals it reads off the SDK's frames. Each serves the capabilities it names and is
probed as hooks apply (`reach`); nothing here imports mcp until then."""

from __future__ import annotations

from otel_mcp_cancel.hooks import asgi_servers
from otel_mcp_cancel.hooks.capabilities import (
    CANCEL_REASONS_V1,
    CLIENT_REQUESTS,
    CLIENT_SESSIONS,
    CROSSINGS_V1,
    HTTP_HANG_UPS,
    LATE_ANSWERS,
    LATE_CANCELS_V1,
    REFUSED_V1,
    REQUESTS_V1,
    SESSIONS,
    STDIO_DELIVERY,
    STDIO_HANG_UPS,
    TASK_SCOPES_V1,
)
from otel_mcp_cancel.hooks.reach import Attribute, Local, Name, Reach

types = Name((REQUESTS_V1, LATE_CANCELS_V1, REFUSED_V1, CLIENT_REQUESTS, LATE_ANSWERS), "mcp", "types")
ServerSession = Name((LATE_CANCELS_V1, REFUSED_V1), "mcp.server.session", "ServerSession")
ClientSession = Name(CLIENT_REQUESTS, "mcp", "ClientSession")
McpError = Name(CLIENT_REQUESTS, "mcp.shared.exceptions", "McpError")
SUPPORTED_PROTOCOL_VERSIONS = Name(REQUESTS_V1, "mcp.shared.version", "SUPPORTED_PROTOCOL_VERSIONS")

_Responder = Name((), "mcp.shared.session", "RequestResponder")
# Whether `respond()` or `cancel()` already answered a request: what tells a ghost's late answer, and what the
# guard drops.
responder_completed = Attribute(REQUESTS_V1, _Responder, "_completed")
responder_entered = Attribute(CROSSINGS_V1, _Responder, "_entered")  # its handler has begun
responder_session = Attribute(CROSSINGS_V1, _Responder, "_session")

_Session = Name((), "mcp.shared.session", "BaseSession")
session_read_stream = Attribute((REQUESTS_V1, SESSIONS), _Session, "_read_stream")
session_write_stream = Attribute((HTTP_HANG_UPS, CLIENT_REQUESTS, CLIENT_SESSIONS, LATE_ANSWERS), _Session,
                                 "_write_stream")
session_in_flight = Attribute(LATE_CANCELS_V1, _Session, "_in_flight")
session_next_request_id = Attribute(CLIENT_REQUESTS, _Session, "_request_id")

_HttpTransport = Name((), "mcp.server.streamable_http", "StreamableHTTPServerTransport")
http_request_streams = Attribute(HTTP_HANG_UPS, _HttpTransport, "_request_streams")
http_event_store = Attribute(HTTP_HANG_UPS, _HttpTransport, "_event_store")
http_write_stream = Attribute(HTTP_HANG_UPS, _HttpTransport, "_write_stream")

# The receive loop validates a notification or a request and hands on only part of it (1.12.3 to 1.30): what it
# validated, and the session, are its locals.
_receive_loop = Name((), "mcp.shared.session", "BaseSession._receive_loop")
receiving_notification = Local(CANCEL_REASONS_V1, _receive_loop, "notification")
receiving_session = Local((LATE_CANCELS_V1, REFUSED_V1), _receive_loop, "self")
receiving_message = Local(REFUSED_V1, _receive_loop, "message")

# The stdout the entered `stdio_server` writes to: a local of its suspended generator.
stdio_stdout = Local(STDIO_DELIVERY, Name((), "mcp.server.stdio", "stdio_server"), "stdout")
# And the stdin it reads (mcp 2.x serves from a private duplicate of fd 0, which it points at /dev/null).
stdio_stdin = Local(STDIO_HANG_UPS, Name((), "mcp.server.stdio", "stdio_server"), "stdin")
# 1.x's streamable HTTP helper yields its session id's getter: no local to read.
http_client_transport = None


SERVER: list[Reach] = [types, ServerSession, SUPPORTED_PROTOCOL_VERSIONS, responder_completed, responder_entered,
                       responder_session, session_read_stream, session_write_stream, session_in_flight,
                       http_request_streams, http_event_store, http_write_stream, receiving_notification,
                       receiving_session, receiving_message, stdio_stdout,
                       stdio_stdin, *asgi_servers.SERVERS]
CLIENT: list[Reach] = [types, ClientSession, McpError, session_write_stream, session_next_request_id]

# The experimental task engine (1.23 and later), imported only where an application enables it.
experimental_session = Attribute(TASK_SCOPES_V1, Name((), "mcp.server.experimental.request_context", "Experimental"),
                                 "_session")
# Its experimental features, if made yet (read without making them: the accessor 1.30 added warns); their
# `task_session_scope`, from 1.25 or so, is public and read as such (an older release's tasks have no scope).
session_experimental = Attribute(TASK_SCOPES_V1, Name((), "mcp.server.session", "ServerSession"),
                                 "_experimental_features")
TASKS: list[Reach] = [experimental_session, session_experimental]
