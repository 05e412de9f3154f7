"""One string end to end: our names equal the semantic conventions' and the documentation's."""

from __future__ import annotations

import importlib
import importlib.metadata
from pathlib import Path

import pytest
from packaging.version import Version

from otel_mcp_cancel import conventions, environment_variables

ROOT = Path(__file__).resolve().parent.parent
# The README and the reference pages it links to.
DOCUMENTATION = "\n".join(path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])

# Each name of ours that a semantic-conventions module publishes: (ours, module, constant or enum member).
PUBLISHED = [
    (conventions.MCP_METHOD_NAME, "attributes.mcp_attributes", "MCP_METHOD_NAME"),
    (conventions.MCP_PROTOCOL_VERSION, "attributes.mcp_attributes", "MCP_PROTOCOL_VERSION"),
    (conventions.MCP_RESOURCE_URI, "attributes.mcp_attributes", "MCP_RESOURCE_URI"),
    (conventions.JSONRPC_REQUEST_ID, "attributes.jsonrpc_attributes", "JSONRPC_REQUEST_ID"),
    (conventions.GEN_AI_OPERATION_NAME, "attributes.gen_ai_attributes", "GEN_AI_OPERATION_NAME"),
    (conventions.GEN_AI_TOOL_NAME, "attributes.gen_ai_attributes", "GEN_AI_TOOL_NAME"),
    (conventions.GEN_AI_PROMPT_NAME, "attributes.gen_ai_attributes", "GEN_AI_PROMPT_NAME"),
    (conventions.GEN_AI_OPERATION_EXECUTE_TOOL, "attributes.gen_ai_attributes",
     "GenAiOperationNameValues.EXECUTE_TOOL"),
    (conventions.NETWORK_TRANSPORT, "attributes.network_attributes", "NETWORK_TRANSPORT"),
    (conventions.NETWORK_TRANSPORT_PIPE, "attributes.network_attributes", "NetworkTransportValues.PIPE"),
    (conventions.NETWORK_TRANSPORT_TCP, "attributes.network_attributes", "NetworkTransportValues.TCP"),
    (conventions.ERROR_TYPE, "attributes.error_attributes", "ERROR_TYPE"),
    (conventions.OTHER, "attributes.error_attributes", "ErrorTypeValues.OTHER"),
    (conventions.RPC_RESPONSE_STATUS_CODE, "attributes.rpc_attributes", "RPC_RESPONSE_STATUS_CODE"),
    (conventions.SERVER_OPERATION_DURATION, "metrics.mcp_metrics", "MCP_SERVER_OPERATION_DURATION"),
    (conventions.CLIENT_OPERATION_DURATION, "metrics.mcp_metrics", "MCP_CLIENT_OPERATION_DURATION"),
]
# The first opentelemetry-semantic-conventions release that publishes every name above. Below it (the declared
# floor is older) a name it lacks is skipped, with its reason; from it on a missing name fails.
FIRST_WITH_EVERY_NAME = Version("0.61b0")
INSTALLED = Version(importlib.metadata.version("opentelemetry-semantic-conventions"))


def published(module: str, member: str) -> str | None:
    """The installed semantic conventions' value of `member` in `module`, or None where they have none."""
    try:
        value = importlib.import_module(f"opentelemetry.semconv._incubating.{module}")
    except ModuleNotFoundError:
        return None
    for part in member.split("."):
        value = getattr(value, part, None)
    return getattr(value, "value", value)


@pytest.mark.parametrize(("ours", "module", "member"), PUBLISHED, ids=[member for _, _, member in PUBLISHED])
def test_semconv_names_are_the_published_ones(ours: str, module: str, member: str) -> None:
    value = published(module, member)
    if value is None and INSTALLED < FIRST_WITH_EVERY_NAME:
        pytest.skip(f"opentelemetry-semantic-conventions {INSTALLED} has no {module}.{member} "
                    f"(published from {FIRST_WITH_EVERY_NAME})")
    assert ours == value


def test_the_ghost_log_line_starts_with_the_designs_greppable_string() -> None:
    assert conventions.GHOST_LOG_PREFIX == "mcp.ghost_response.suppressed_after_cancel_ack"


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
        conventions.GHOST_RESPONSES,
        conventions.TOOL_GHOST_KIND,
        *conventions.GHOST_KINDS,
        conventions.GHOST_LOG_PREFIX,
        conventions.ERROR_TYPE_TOOL_ERROR,
        conventions.OTHER,
        environment_variables.OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS,
        environment_variables.OTEL_PYTHON_MCP_CANCEL_GHOST_GUARD,
        environment_variables.OTEL_PYTHON_MCP_CANCEL_COURTESY_CANCEL,
        environment_variables.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT,
        environment_variables.OTEL_SEMCONV_STABILITY_OPT_IN,
        conventions.RPC_STATUS_CODE,
        conventions.MCP_RESULT_TYPE,
        conventions.RESULT_TYPE_INPUT_REQUIRED,
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
