"""Environment variables read by otel-mcp-cancel, each documented once here and in the README."""

OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS = "OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS"
"""`unset` (default) leaves cancelled spans with status UNSET; `error` marks them ERROR.

Read when `instrument()` runs. `error.type` is never set on a cancelled span either way."""

OTEL_PYTHON_MCP_CANCEL_GHOST_GUARD = "OTEL_PYTHON_MCP_CANCEL_GHOST_GUARD"
"""mcp 1.x only. `on` (default): a late answer after the cancel acknowledgement, or a cancel that lands
while the answer is being written, is dropped instead of ending the session. `off`: the ghost is still
recorded, then the SDK behaves as it always did. Read when `instrument()` runs."""

OTEL_PYTHON_MCP_CANCEL_RETRY_WINDOW_SECONDS = "OTEL_PYTHON_MCP_CANCEL_RETRY_WINDOW_SECONDS"
"""How long after a ghost a call with the same session, tool and arguments counts as its retry.
Default 300 seconds. Read when `instrument()` runs."""

OTEL_PYTHON_MCP_CANCEL_FINGERPRINT_KEY = "OTEL_PYTHON_MCP_CANCEL_FINGERPRINT_KEY"
"""Unset (default): nothing. A secret shared by the replicas of a server: every tools/call server span
(and a ghost's task span) carries `tool.call_fingerprint`, 32 hex characters of an HMAC-SHA256, under this
key, of the tool's name and its arguments: equal for the same call on any replica that has the key, and
never the arguments themselves. Read when `instrument()` runs."""

OTEL_PYTHON_MCP_CANCEL_COURTESY_CANCEL = "OTEL_PYTHON_MCP_CANCEL_COURTESY_CANCEL"
"""mcp 1.x clients only. `off` (default) or `on`: on a read timeout or a cancelled caller, send
`notifications/cancelled` as 2.x clients do, so the server stops the work and both ends say cancelled.
Off by default because it changes what goes on the wire, and an uninstrumented 1.x server whose handler
finishes after a cancel ends its session (SDK issue #2416)."""

OTEL_SEMCONV_STABILITY_OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"
"""OpenTelemetry's shared opt-in, a comma-separated list; the plugin reads its `rpc` values, as the RPC
conventions (core v1.45.0) define them, for the one RPC name it writes. Unset (default): a JSON-RPC error code is
`rpc.response.status_code`. `rpc`: `rpc.status_code` instead. `rpc/dup`: both (it wins over `rpc`); either
also makes the schema URL core v1.45.0's. Read when `instrument()` runs."""


OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI instrumentations' shared opt-in. `true`: tools/call spans (server and client) carry
`gen_ai.tool.call.arguments` and `gen_ai.tool.call.result` as JSON, cut to 4096 characters. Anything
else (the default): tool arguments and results are never recorded. Read when `instrument()` runs."""
