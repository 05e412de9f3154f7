"""Environment variables read by otel-mcp-cancel, each documented once here and in the README."""

OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS = "OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS"
"""`unset` (default) leaves cancelled spans with status UNSET; `error` marks them ERROR.

Read when `instrument()` runs. `error.type` is never set on a cancelled span either way."""
