"""What the plugin can observe, each named as an operator reads it in the WARNING that says it was lost: every
hook (`wrapping.Hook`) and every reach into an SDK's internals (`reach`) names the capability it serves, and a
capability is kept whole or lost whole."""

# Servers, both lines
SESSIONS = "server sessions (mcp.server.session.duration), and which requests came over stdio"
TOOL_ENDS = "how a tool's own function ended: ghosts of tool calls"
HTTP_HANG_UPS = "streamable HTTP callers that hung up on one request"
SERVED_METHODS = "methods a server serves beyond the protocol's list (an extension's), named rather than _OTHER"
STDIO_DELIVERY = "stdio answers that never reached their caller (a failed write to stdout)"
HTTP_APP_EXPORT = "the export as a streamable HTTP app stops (each uvicorn worker's last telemetry)"
STDIO_HANG_UPS = ("stdio callers that hung up while a handler blocked the event loop (its calls concluded before "
                  "the host's SIGTERM)")

# Servers, mcp 2.x
STREAM_REQUESTS = "server spans and outcomes of requests over stdio, HTTP, SSE and memory streams"
CANCELS_V2 = "the reasons and spans of cancels a server receives"
DIRECT_REQUESTS = "spans of requests to an in-process server (`Client(server)`)"
HANDLER_ENDS_V2 = ("how a server's handler ended (ghosts), and requests on the 2026-07-28 single-exchange HTTP "
                   "entry")
SINGLE_EXCHANGE = "server spans and outcomes of requests on the 2026-07-28 single-exchange HTTP entry"
EXCHANGE_DELIVERY = ("streamable HTTP answers written after their caller closed the request (its caller gone, or on "
                     "the 2026-07-28 revision cancelled; a ghost where the handler finished)")
ONE_SERVER_SPAN = "one SERVER span per request (the SDK's own steps aside for ours)"

# Servers, mcp 1.x
REQUESTS_V1 = "server spans and outcomes of every request, and the guard that keeps a ghost's session alive"
CANCEL_REASONS_V1 = "the reasons cancels give, on the spans of the calls they cancel (mcp 1.x)"
CROSSINGS_V1 = ("cancels read while or after a call was answered, or before its handler began: crossed ghosts "
                "(mcp 1.x)")
LATE_CANCELS_V1 = "the spans of cancels for requests no longer in flight"
REFUSED_V1 = "the spans of requests mcp 1.x refuses before any handler (server/discover, invalid params)"

# Clients
CLIENT_REQUESTS = "client spans and outcomes of the requests a client sends"
CLIENT_SESSIONS = "client sessions (mcp.client.session.duration), and calls whose caller closed the session"
TRANSPORT_FAILURES = "client calls whose streamable HTTP transport failed (failed, with the HTTP status or the error)"
LATE_ANSWERS = "answers that reached a client after it gave up on the call (late_answer ghosts)"
CANCEL_REASONS_CLIENT = "why a client gave up a call (tool.cancel_reason: timeout or caller)"
ONE_CLIENT_SPAN = "one CLIENT span per request (the SDK's own steps aside for ours)"
CLIENT_SESSION_IDS = "the session id a streamable HTTP client's transport was given (mcp.session.id)"

# Tasks
TASKS_V1 = "the spans and outcomes of mcp 1.x's experimental tasks"
TASK_SCOPES_V1 = "whether mcp 1.x serves a task only to its own session (its result's reach when that session ends)"

# Standalone FastMCP
FASTMCP_REGISTRY = "FastMCP tools a call names before FastMCP ran them: their names and ghosts' risk"
