"""Every string this plugin writes: outcome values, attribute keys, event names, metric names.

One string travels end to end: the value written on a span is the value in the
metric attribute, the collector pipeline and the dashboard query. Nothing else
in the package spells these names out.
"""

# What the caller got from a tools/call.
OUTCOME_OK = "ok"
OUTCOME_FAILED = "failed"
OUTCOME_CANCELLED = "cancelled"
OUTCOMES = (OUTCOME_OK, OUTCOME_FAILED, OUTCOME_CANCELLED)

# This plugin's own names live under `tool.`, a namespace no OpenTelemetry convention defines; the MCP
# convention's own names (mcp.*, gen_ai.*, jsonrpc.*, ...) are written only as it defines them
# (docs/telemetry.md, "Whose names").
TOOL_OUTCOME = "tool.outcome"
TOOL_HANDLER_OUTCOME = "tool.handler_outcome"
TOOL_GHOST_RISK = "tool.ghost_risk"
# On a ghost's own span (one found after its call's span was decided): how its answer was lost.
TOOL_GHOST_KIND = "tool.ghost_kind"  # on every ghost, its span, its event, its point and its WARNING
GHOST_KIND_SUPPRESSED = "suppressed"  # cancelled while running, its handler finished: its answer was not written
GHOST_KIND_CALLER_GONE = "caller_gone"  # its caller left without cancelling; its handler finished after
GHOST_KIND_CROSSED = "crossed"  # answered, and its caller's cancel, sent before the answer arrived, read after
GHOST_KIND_LATE_ANSWER = "late_answer"  # a client's: the server's answer came after the client gave up on the call
# A task's work done, its caller believing it was not:
GHOST_KIND_TASK_CANCELLED = "task_cancelled"  # the task was cancelled while its work ran on to its end
GHOST_KIND_TASK_CANCEL_LATE = "task_cancel_late"  # a tasks/cancel came after the task had finished
GHOST_KIND_TASK_SESSION_ENDED = "task_session_ended"  # its session ended before its caller was told how it ended
GHOST_KIND_TASK_EXPIRED = "task_expired"  # its result expired before its caller asked
GHOST_KIND_TASK_PROCESS_ENDED = "task_process_ended"  # the server's process ended before its caller was told
GHOST_KINDS = (GHOST_KIND_SUPPRESSED, GHOST_KIND_CALLER_GONE, GHOST_KIND_CROSSED, GHOST_KIND_LATE_ANSWER,
               GHOST_KIND_TASK_CANCELLED, GHOST_KIND_TASK_CANCEL_LATE, GHOST_KIND_TASK_SESSION_ENDED,
               GHOST_KIND_TASK_EXPIRED, GHOST_KIND_TASK_PROCESS_ENDED)
TOOL_RETRIED_GHOST_RISK = "tool.retried_ghost_risk"  # on a call that repeats a ghost: that ghost's risk
# On a client's call that repeats one it gave up on (same tool and arguments): why it gave up (timeout | caller).
TOOL_RETRIED_CANCEL_REASON = "tool.retried_cancel_reason"
# On every tools/call server span (and a ghost's task span), with a key the replicas share: the same tool with
# the same arguments gives the same value on any replica, so a ghost and its retry elsewhere can be joined.
TOOL_CALL_FINGERPRINT = "tool.call_fingerprint"
# Why a call ended unanswered, from the caller's side: `timeout` or `caller` (bounded; CLIENT spans and events).
TOOL_CANCEL_REASON = "tool.cancel_reason"
# The reason text a peer's `notifications/cancelled` carried, cut to size: on events only, never an attribute
# an operator filters or counts on.
TOOL_CANCEL_MESSAGE = "tool.cancel_message"
# On a server's `notifications/cancelled` span: the id of the request it cancels (a notification has no
# jsonrpc.request.id of its own).
TOOL_CANCELLED_REQUEST_ID = "tool.cancelled_request_id"
# A task-augmented call (MCP tasks): the spec's Task fields `taskId`, `status` and `statusMessage`, named as the
# MCP convention names the spec's other fields. The id on spans only (unbounded), the status on spans and metrics.
MCP_TASK_ID = "mcp.task.id"
MCP_TASK_STATUS = "mcp.task.status"
MCP_TASK_STATUS_MESSAGE = "mcp.task.status_message"  # on a status event, cut to size
# An interim answer of the 2026-07-28 multi-round-trip flow (the spec's result field `resultType`, named as the
# task fields are): a tools/call answered `input_required` has no outcome yet; the request that completes it does.
MCP_RESULT_TYPE = "mcp.result_type"
RESULT_TYPE_INPUT_REQUIRED = "input_required"

# Semantic-convention attributes (MCP conventions, semantic-conventions-genai).
MCP_METHOD_NAME = "mcp.method.name"
# A method neither in the protocol's list nor served by this server is _OTHER in mcp.method.name and in the
# span name; its name as sent goes here, cut to size (as HTTP's http.request.method_original).
MCP_METHOD_NAME_ORIGINAL = "mcp.method.name_original"
MCP_PROTOCOL_VERSION = "mcp.protocol.version"
MCP_RESOURCE_URI = "mcp.resource.uri"
JSONRPC_REQUEST_ID = "jsonrpc.request.id"
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_PROMPT_NAME = "gen_ai.prompt.name"
# Opt-in only (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT): what a tool was given and gave back.
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
NETWORK_TRANSPORT = "network.transport"
NETWORK_PROTOCOL_NAME = "network.protocol.name"
NETWORK_PROTOCOL_VERSION = "network.protocol.version"
CLIENT_ADDRESS = "client.address"
CLIENT_PORT = "client.port"
# The transport's own session id (streamable HTTP's `Mcp-Session-Id`): spans only, never a metric attribute.
MCP_SESSION_ID = "mcp.session.id"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
RPC_RESPONSE_STATUS_CODE = "rpc.response.status_code"
# Core semantic conventions v1.45.0 (on which semantic-conventions-genai v0.1.0 is built) renamed it, and
# deprecated the old name: written instead with OTEL_SEMCONV_STABILITY_OPT_IN=rpc, both with rpc/dup.
RPC_STATUS_CODE = "rpc.status_code"

# What our request spans say. A framework that writes on our span in place of its own (FastMCP, see
# hooks/fastmcp_spans.py) adds its attributes beside these but never changes them.
REQUEST_SPAN_ATTRIBUTES = frozenset(
    {
        TOOL_OUTCOME,
        TOOL_HANDLER_OUTCOME,
        TOOL_GHOST_RISK,
        TOOL_RETRIED_GHOST_RISK,
        TOOL_RETRIED_CANCEL_REASON,
        TOOL_CANCEL_REASON,
        MCP_TASK_ID,
        MCP_TASK_STATUS,
        MCP_RESULT_TYPE,
        MCP_METHOD_NAME,
        MCP_METHOD_NAME_ORIGINAL,
        MCP_PROTOCOL_VERSION,
        MCP_RESOURCE_URI,
        JSONRPC_REQUEST_ID,
        GEN_AI_OPERATION_NAME,
        GEN_AI_TOOL_NAME,
        GEN_AI_PROMPT_NAME,
        GEN_AI_TOOL_CALL_ARGUMENTS,
        GEN_AI_TOOL_CALL_RESULT,
        NETWORK_TRANSPORT,
        NETWORK_PROTOCOL_NAME,
        NETWORK_PROTOCOL_VERSION,
        CLIENT_ADDRESS,
        CLIENT_PORT,
        SERVER_ADDRESS,
        SERVER_PORT,
        ERROR_TYPE,
        RPC_RESPONSE_STATUS_CODE,
        RPC_STATUS_CODE,
    }
)

GEN_AI_OPERATION_EXECUTE_TOOL = "execute_tool"
INITIALIZE = "initialize"
TOOLS_CALL = "tools/call"
TOOLS_LIST = "tools/list"
PROMPTS_GET = "prompts/get"
NAMED_TARGET_METHODS = frozenset({TOOLS_CALL, PROMPTS_GET})  # their span names and metrics name a tool or prompt
NOTIFICATIONS_CANCELLED = "notifications/cancelled"
# A 2026-07-28 request that lives as long as its caller keeps it open (its answer ends the subscription).
SUBSCRIPTIONS_LISTEN = "subscriptions/listen"
SUBSCRIPTION_METHODS = frozenset({SUBSCRIPTIONS_LISTEN})
TASKS_GET = "tasks/get"
TASKS_RESULT = "tasks/result"
TASKS_CANCEL = "tasks/cancel"
TASKS_UPDATE = "tasks/update"
TASK_METHODS = frozenset({TASKS_GET, TASKS_RESULT, TASKS_CANCEL, TASKS_UPDATE})  # each names one task

# A task's statuses (spec 2025-11-25 and the 2026-07-28 tasks extension). A status outside the list is _OTHER.
TASK_WORKING = "working"
TASK_INPUT_REQUIRED = "input_required"
TASK_COMPLETED = "completed"
TASK_FAILED = "failed"
TASK_CANCELLED = "cancelled"
TASK_STATUSES = frozenset({TASK_WORKING, TASK_INPUT_REQUIRED, TASK_COMPLETED, TASK_FAILED, TASK_CANCELLED})
TERMINAL_TASK_STATUSES = frozenset({TASK_COMPLETED, TASK_FAILED, TASK_CANCELLED})

# Status descriptions of failed spans that have no JSON-RPC error message (tool content stays opt-in).
TOOL_ERROR_DESCRIPTION = "the tool's result has isError: true"
UNANSWERED_DESCRIPTION = "the request ended unanswered, and not by a cancel"
TASK_FAILED_DESCRIPTION = "the task's status is failed"
TASK_UNSETTLED_DESCRIPTION = "the task's work ended without a terminal status"
PROCESS_ENDED_DESCRIPTION = "the server's process ended while the task was working"
CONNECTION_LOST_DESCRIPTION = "the connection closed before the task's outcome reached its caller"

# Values of error.type that are not a JSON-RPC code.
ERROR_TYPE_TOOL_ERROR = "tool_error"
# The JSON-RPC code both SDK lines give a request whose connection closed under it (CONNECTION_CLOSED).
ERROR_TYPE_CONNECTION_CLOSED = "-32000"
ERROR_TYPE_TIMEOUT = "timeout"  # a client's call that its timeout ended: the convention's own example value
OTHER = "_OTHER"  # semconv's fallback for error.type, and the fold for unregistered tool names

# How dangerous a ghost is, from the tool's own annotations.
GHOST_RISK_NONE = "none"  # read-only: nothing happened twice
GHOST_RISK_IDEMPOTENT = "idempotent"  # writes, declared idempotent: a retry repeats no effect
GHOST_RISK_UNSAFE = "unsafe"  # writes, not idempotent, or destructive: a retry may do it twice
GHOST_RISK_UNKNOWN = "unknown"  # the tool declared nothing
GHOST_RISKS = (GHOST_RISK_NONE, GHOST_RISK_IDEMPOTENT, GHOST_RISK_UNSAFE, GHOST_RISK_UNKNOWN)

NETWORK_TRANSPORT_PIPE = "pipe"
NETWORK_TRANSPORT_TCP = "tcp"
NETWORK_PROTOCOL_HTTP = "http"

# Span events: all this plugin's own.
EVENT_EXCEPTION = "exception"  # OpenTelemetry's own
EVENT_REQUEST_CANCELLED = "tool.request_cancelled"
EVENT_CANCEL_RECEIVED = "tool.cancel_received"  # on a server's notifications/cancelled span, with its reason text
EVENT_GHOST_SUPPRESSED = "tool.ghost_response"
EVENT_RESPONSE_WRITE_INTERRUPTED = "tool.response_write_interrupted"  # mcp 1.x: a cancellation cut the write short
EVENT_GHOST_RETRIED = "tool.ghost_retry"
EVENT_TASK_STATUS = "tool.task_status_changed"  # on a task's span, each status it reached, with its time

# Why a client's call ended without an answer (tool.cancel_reason on its span and its cancel event; a server
# has only the peer's free text, on events as tool.cancel_message).
CANCEL_REASON_TIMEOUT = "timeout"
CANCEL_REASON_CALLER = "caller"

# The semantic-conventions release whose names this telemetry follows: by default the last core release that held
# the MCP conventions (they now live in semantic-conventions-genai, which publishes no schema of its own); with the
# rpc stability opt-in (`rpc.status_code`), core v1.45.0, on which semantic-conventions-genai v0.1.0 is built.
SCHEMA_URL_DEFAULT = "https://opentelemetry.io/schemas/1.41.0"
SCHEMA_URL_RPC = "https://opentelemetry.io/schemas/1.45.0"

# Metrics.
SERVER_OPERATION_DURATION = "mcp.server.operation.duration"
CLIENT_OPERATION_DURATION = "mcp.client.operation.duration"
# This plugin's own, not in the convention's mcp.*: every ghost, a server's or a client's, by tool.ghost_kind.
GHOST_RESPONSES = "tool.ghost_responses"
SERVER_GHOST_RETRIES = "tool.ghost_retries"
SERVER_SESSION_DURATION = "mcp.server.session.duration"
CLIENT_SESSION_DURATION = "mcp.client.session.duration"

# The WARNING line a ghost writes on logger "otel_mcp_cancel" starts with this text, fixed by the design this
# plugin implements so that operators can grep their logs for it. A log line's text is not an attribute or event
# name, so it keeps its `mcp.` prefix where the span event is `tool.ghost_response`.
GHOST_LOG_PREFIX = "mcp.ghost_response.suppressed_after_cancel_ack"

# JSON-RPC codes semconv calls the caller's fault: the outcome is still failed,
# but the server span status stays UNSET.
# The convention's (parse error, invalid request, method not found, invalid params, resource not found), and the
# 2026-07-28 revision's: a header that disagrees with its body (-32020), a client capability the request needs
# and the client did not declare (-32021), a protocol version the server does not serve (-32022, what a client
# negotiating is answered). The convention's list predates them (docs/telemetry.md, "Deviations").
CALLER_FAULT_CODES = frozenset({-32700, -32600, -32601, -32602, -32002, -32020, -32021, -32022})

# Peer-supplied strings (reasons, names, URIs) are cut to this many characters.
MAX_ATTRIBUTE_LENGTH = 256
# Captured tool arguments and results (opt-in) are cut to this many characters.
MAX_CONTENT_LENGTH = 4096

# The peer's implementation, as the `initialize` exchange (or, from 2026-07-28, a request's or result's `_meta`)
# names it: the client's on a server's spans, the server's on a client's. Names of the open proposal for MCP's
# conventions (semantic-conventions-genai#437), not yet in them: listed as deviations in the conformance test.
MCP_CLIENT_NAME = "mcp.client.name"
MCP_CLIENT_VERSION = "mcp.client.version"
MCP_SERVER_NAME = "mcp.server.name"
MCP_SERVER_VERSION = "mcp.server.version"
CLIENT_INFO_META_KEY = "io.modelcontextprotocol/clientInfo"
SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"
