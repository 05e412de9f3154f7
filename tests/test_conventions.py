"""One string end to end: our names equal the semantic conventions' and the documentation's."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.semconv._incubating.attributes import (
    error_attributes,
    gen_ai_attributes,
    jsonrpc_attributes,
    mcp_attributes,
    network_attributes,
    rpc_attributes,
)
from opentelemetry.semconv._incubating.metrics import mcp_metrics

from otel_mcp_cancel import conventions, environment_variables

ROOT = Path(__file__).resolve().parent.parent
# The README and the reference pages it links to.
DOCUMENTATION = "\n".join(path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def test_semconv_names_are_the_published_ones() -> None:
    assert conventions.MCP_METHOD_NAME == mcp_attributes.MCP_METHOD_NAME
    assert conventions.MCP_PROTOCOL_VERSION == mcp_attributes.MCP_PROTOCOL_VERSION
    assert conventions.MCP_RESOURCE_URI == mcp_attributes.MCP_RESOURCE_URI
    assert conventions.JSONRPC_REQUEST_ID == jsonrpc_attributes.JSONRPC_REQUEST_ID
    assert conventions.GEN_AI_OPERATION_NAME == gen_ai_attributes.GEN_AI_OPERATION_NAME
    assert conventions.GEN_AI_TOOL_NAME == gen_ai_attributes.GEN_AI_TOOL_NAME
    assert conventions.GEN_AI_PROMPT_NAME == gen_ai_attributes.GEN_AI_PROMPT_NAME
    assert conventions.GEN_AI_OPERATION_EXECUTE_TOOL == gen_ai_attributes.GenAiOperationNameValues.EXECUTE_TOOL.value
    assert conventions.NETWORK_TRANSPORT == network_attributes.NETWORK_TRANSPORT
    assert conventions.NETWORK_TRANSPORT_PIPE == network_attributes.NetworkTransportValues.PIPE.value
    assert conventions.NETWORK_TRANSPORT_TCP == network_attributes.NetworkTransportValues.TCP.value
    assert conventions.ERROR_TYPE == error_attributes.ERROR_TYPE
    assert conventions.OTHER == error_attributes.ErrorTypeValues.OTHER.value
    assert conventions.RPC_RESPONSE_STATUS_CODE == rpc_attributes.RPC_RESPONSE_STATUS_CODE
    assert conventions.SERVER_OPERATION_DURATION == mcp_metrics.MCP_SERVER_OPERATION_DURATION
    assert conventions.CLIENT_OPERATION_DURATION == mcp_metrics.MCP_CLIENT_OPERATION_DURATION


def test_every_emitted_name_and_value_is_documented() -> None:
    emitted = [
        *conventions.OUTCOMES,
        conventions.TOOL_OUTCOME,
        conventions.TOOL_HANDLER_OUTCOME,
        conventions.TOOL_GHOST_RISK,
        *conventions.GHOST_RISKS,
        conventions.EVENT_GHOST_RETRIED,
        conventions.SERVER_GHOST_RETRIES,
        conventions.CLIENT_OPERATION_DURATION,
        conventions.CANCEL_REASON_TIMEOUT,
        conventions.CANCEL_REASON_CALLER,
        environment_variables.OTEL_PYTHON_MCP_CANCEL_RETRY_WINDOW_SECONDS,
        conventions.TOOL_CANCEL_REASON,
        conventions.TOOL_CANCEL_MESSAGE,
        conventions.TOOL_CANCELLED_REQUEST_ID,
        conventions.EVENT_CANCEL_RECEIVED,
        conventions.EVENT_TASK_STATUS,
        conventions.ERROR_TYPE_TIMEOUT,
        conventions.EVENT_REQUEST_CANCELLED,
        conventions.EVENT_GHOST_SUPPRESSED,
        conventions.EVENT_RESPONSE_WRITE_INTERRUPTED,
        conventions.SERVER_OPERATION_DURATION,
        conventions.SERVER_GHOST_RESPONSES,
        conventions.GHOST_LOG_PREFIX,
        conventions.ERROR_TYPE_TOOL_ERROR,
        conventions.OTHER,
        environment_variables.OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS,
        environment_variables.OTEL_PYTHON_MCP_CANCEL_GHOST_GUARD,
        environment_variables.OTEL_PYTHON_MCP_CANCEL_COURTESY_CANCEL,
        environment_variables.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT,
        conventions.GEN_AI_TOOL_CALL_ARGUMENTS,
        conventions.GEN_AI_TOOL_CALL_RESULT,
        conventions.TOOL_RETRIED_GHOST_RISK,
        conventions.MCP_METHOD_NAME_ORIGINAL,
        conventions.TOOL_ERROR_DESCRIPTION,
    ]
    assert [name for name in emitted if f"`{name}`" not in DOCUMENTATION] == []
    # Prometheus' normalisation of our names, as dashboards will query them.
    for name in (
        "tool_outcome",
        "tool_ghost_risk",
        "tool_ghost_responses_total",
        "tool_ghost_retries_total",
        "mcp_server_operation_duration_seconds",
    ):
        assert name in DOCUMENTATION
