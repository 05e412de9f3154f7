"""What the user chose, read once as `instrument()` runs into one immutable value: every environment variable the
plugin reads (`environment_variables`), and the semantic-convention stability mode with the schema URL it implies.
Nothing reads the environment after that."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import NamedTuple

from otel_mcp_cancel.conventions import (
    RPC_RESPONSE_STATUS_CODE,
    RPC_STATUS_CODE,
    SCHEMA_URL_DEFAULT,
    SCHEMA_URL_RPC,
)
from otel_mcp_cancel.environment_variables import (
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT,
    OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS,
    OTEL_PYTHON_MCP_CANCEL_COURTESY_CANCEL,
    OTEL_PYTHON_MCP_CANCEL_FINGERPRINT_KEY,
    OTEL_PYTHON_MCP_CANCEL_GHOST_GUARD,
    OTEL_PYTHON_MCP_CANCEL_RETRY_WINDOW_SECONDS,
    OTEL_SEMCONV_STABILITY_OPT_IN,
)

logger = logging.getLogger("otel_mcp_cancel")

DEFAULT_RETRY_WINDOW_SECONDS = 300.0


class Config(NamedTuple):
    cancelled_is_error: bool  # OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS=error
    capture_content: bool  # OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true
    ghost_guard: bool  # mcp 1.x: OTEL_PYTHON_MCP_CANCEL_GHOST_GUARD, on unless off
    courtesy_cancel: bool  # mcp 1.x clients: OTEL_PYTHON_MCP_CANCEL_COURTESY_CANCEL=on
    retry_window_seconds: float
    fingerprint_key: str | None  # the replicas' shared key, if given
    status_code_names: tuple[str, ...]  # what a JSON-RPC error code is written as (the rpc stability opt-in)
    schema_url: str  # the conventions release those names follow


def read(environ: Mapping[str, str] = os.environ) -> Config:
    names = status_code_names(environ.get(OTEL_SEMCONV_STABILITY_OPT_IN))
    return Config(
        cancelled_is_error=_choice(environ, OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS, ("unset", "error"))
        == "error",
        capture_content=environ.get(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, "").strip().lower() == "true",
        ghost_guard=_choice(environ, OTEL_PYTHON_MCP_CANCEL_GHOST_GUARD, ("on", "off")) == "on",
        courtesy_cancel=_choice(environ, OTEL_PYTHON_MCP_CANCEL_COURTESY_CANCEL, ("off", "on")) == "on",
        retry_window_seconds=_seconds(environ, OTEL_PYTHON_MCP_CANCEL_RETRY_WINDOW_SECONDS,
                                      DEFAULT_RETRY_WINDOW_SECONDS),
        fingerprint_key=environ.get(OTEL_PYTHON_MCP_CANCEL_FINGERPRINT_KEY) or None,
        status_code_names=names,
        schema_url=SCHEMA_URL_RPC if RPC_STATUS_CODE in names else SCHEMA_URL_DEFAULT,
    )


def status_code_names(opt_in: str | None) -> tuple[str, ...]:
    """The names a JSON-RPC error code is written under, from OTEL_SEMCONV_STABILITY_OPT_IN's value: the RPC
    conventions' transition (core v1.45.0) from `rpc.response.status_code` to `rpc.status_code`."""
    values = {value.strip() for value in (opt_in or "").split(",")}
    if "rpc/dup" in values:
        return RPC_RESPONSE_STATUS_CODE, RPC_STATUS_CODE
    return (RPC_STATUS_CODE,) if "rpc" in values else (RPC_RESPONSE_STATUS_CODE,)


def _seconds(environ: Mapping[str, str], variable: str, default: float) -> float:
    raw = environ.get(variable, str(default))
    try:
        return max(float(raw), 0.0)
    except ValueError:
        logger.warning("otel_mcp_cancel: %s=%r is not a number of seconds; using %s", variable, raw, default)
        return default


def _choice(environ: Mapping[str, str], variable: str, allowed: tuple[str, ...]) -> str:
    """The variable's value if allowed, else (with a warning) the first allowed value, the default."""
    value = environ.get(variable, allowed[0]).strip().lower()
    if value not in allowed:
        logger.warning("otel_mcp_cancel: %s=%r is not one of %s; using %r", variable, value, allowed, allowed[0])
        return allowed[0]
    return value
