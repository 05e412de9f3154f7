"""Pure helpers that turn peer-supplied request data into bounded span and metric attributes."""

from __future__ import annotations

import functools
import json
import traceback
from collections.abc import Mapping
from typing import Any

from otel_mcp_cancel.answers import exception_type
from otel_mcp_cancel.conventions import (
    ERROR_TYPE,
    GEN_AI_OPERATION_EXECUTE_TOOL,
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROMPT_NAME,
    GEN_AI_TOOL_NAME,
    JSONRPC_REQUEST_ID,
    MAX_ATTRIBUTE_LENGTH,
    MAX_CONTENT_LENGTH,
    MCP_METHOD_NAME,
    MCP_METHOD_NAME_ORIGINAL,
    MCP_PROTOCOL_VERSION,
    MCP_RESOURCE_URI,
    MCP_RESULT_TYPE,
    MCP_TASK_STATUS,
    NETWORK_PROTOCOL_HTTP,
    NETWORK_PROTOCOL_NAME,
    NETWORK_PROTOCOL_VERSION,
    NETWORK_TRANSPORT,
    OTHER,
    PROMPTS_GET,
    RPC_RESPONSE_STATUS_CODE,
    TASK_METHODS,
    TOOL_OUTCOME,
    TOOLS_CALL,
)
from otel_mcp_cancel.outcome import SHARED_VERDICTS, Verdict

# Methods a client can send are a closed set in the spec; anything else a server does not serve is
# folded, on spans and metrics, so a peer cannot mint span names or series with invented methods.
KNOWN_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "subscriptions/listen",
        "logging/setLevel",
        "completion/complete",
        "tasks/get",
        "tasks/result",
        "tasks/list",
        "tasks/cancel",
        "tasks/update",
    }
)


def bounded(value: object) -> str:
    """A peer-supplied value as a string of at most MAX_ATTRIBUTE_LENGTH characters."""
    text = value if isinstance(value, str) else repr(value)
    return text[:MAX_ATTRIBUTE_LENGTH]


def span_name(method: str, target: str | None, target_registered: bool) -> str:
    """`{mcp.method.name} {target}`; `{mcp.method.name}` alone when the target is not a low-cardinality one (a
    tool the server has not registered), as the convention says."""
    # Slices, not `bounded`: these are strings, and this runs several times on every request.
    if target is None or not target_registered:
        return method[:MAX_ATTRIBUTE_LENGTH]
    return f"{method[:MAX_ATTRIBUTE_LENGTH]} {target}"


def method_attributes(method: str, method_known: bool) -> dict[str, Any]:
    """mcp.method.name, or _OTHER and the name as sent for a method neither in the protocol nor served."""
    if method_known:
        return {MCP_METHOD_NAME: bounded(method)}
    return {MCP_METHOD_NAME: OTHER, MCP_METHOD_NAME_ORIGINAL: bounded(method)}


def request_attributes(
    method: str,
    method_known: bool,
    fields: Mapping[str, Any] | None,
    request_id: object,
    network_transport: str | None,
) -> tuple[dict[str, Any], str | None, str | None, str | None]:
    """What a request's `request_fields` tell as it arrives: its span attributes, the tool or prompt name it
    names (cut to size), the task a `tasks/*` request names (`taskId`, cut to size), and its span's name with
    that target (as `span_name` names it; None without a target, or for a method not known yet). One call:
    it runs on every request. A method not in the protocol's list gets its attributes once the request is over, when it
    is known whether the server serves it."""
    target = task_id = uri = None
    if fields is not None:
        name = fields.get("name")
        target = name[:MAX_ATTRIBUTE_LENGTH] if isinstance(name, str) else None
        uri = fields.get("uri")
        if method in TASK_METHODS:
            named = fields.get("taskId")
            task_id = bounded(named) if isinstance(named, str) else None
    shared, target_name = _target_attributes(method if method_known else None, target, network_transport)
    attributes = dict(shared)
    if request_id is not None:
        attributes[JSONRPC_REQUEST_ID] = str(request_id)[:MAX_ATTRIBUTE_LENGTH]
    if isinstance(uri, str):
        attributes[MCP_RESOURCE_URI] = bounded(uri)
    return attributes, target, task_id, target_name


# Keyed by known methods only, and by a tool's or prompt's name cut to size: names a peer invents only churn it.
@functools.lru_cache(maxsize=1024)
def _target_attributes(
    method: str | None, target: str | None, network_transport: str | None
) -> tuple[dict[str, Any], str | None]:
    """The attributes every request of a known method (None: one not known yet), target and transport starts
    with, made once and copied for each (never mutate them); and the span name naming that target."""
    attributes: dict[str, Any] = {MCP_METHOD_NAME: method[:MAX_ATTRIBUTE_LENGTH]} if method is not None else {}
    if method == TOOLS_CALL:
        attributes[GEN_AI_OPERATION_NAME] = GEN_AI_OPERATION_EXECUTE_TOOL
        if target is not None:
            attributes[GEN_AI_TOOL_NAME] = target
    elif method == PROMPTS_GET and target is not None:
        attributes[GEN_AI_PROMPT_NAME] = target
    if network_transport is not None:
        attributes[NETWORK_TRANSPORT] = network_transport
    return attributes, span_name(method, target, True) if method is not None and target is not None else None


def verdict_attributes(method: str, verdict: Verdict) -> tuple[tuple[str, Any], ...]:
    """Attributes the verdict adds to the span and to the duration metric, as (key, value) pairs: what the
    metric's attributes are looked up by. A tools/call's shared verdicts' are made once."""
    if method == TOOLS_CALL:
        shared = _SHARED_TOOL_CALL_OUTCOMES.get(id(verdict))
        if shared is not None:
            return shared
    return _verdict_pairs(method, verdict)


def _verdict_pairs(method: str, verdict: Verdict) -> tuple[tuple[str, Any], ...]:
    attributes: list[tuple[str, Any]] = []
    if method == TOOLS_CALL and verdict.outcome is not None:
        attributes.append((TOOL_OUTCOME, verdict.outcome))
    if verdict.task_status is not None:
        attributes.append((MCP_TASK_STATUS, verdict.task_status))
    if verdict.result_type is not None:
        attributes.append((MCP_RESULT_TYPE, verdict.result_type))
    if verdict.error_type is not None:
        attributes.append((ERROR_TYPE, verdict.error_type))
    if verdict.status_code is not None:
        attributes.extend((name, verdict.status_code) for name in _status_code_names)
    return tuple(attributes)


def write_status_code_as(names: tuple[str, ...]) -> None:
    """Chosen once per instrumentation, as contrib's instrumentations read their stability opt-in."""
    global _status_code_names
    _status_code_names = names


_status_code_names = (RPC_RESPONSE_STATUS_CODE,)


# By id: the shared verdicts live as long as this module, so no other object can have their ids.
_SHARED_TOOL_CALL_OUTCOMES = {id(verdict): _verdict_pairs(TOOLS_CALL, verdict) for verdict in SHARED_VERDICTS}


# Keyed by folded values only (a method, tool or prompt name the server does not serve is _OTHER: see
# `RequestRecord.metric_attributes`), so a peer's invented names cannot churn the cache.
@functools.lru_cache(maxsize=1024)
def metric_attributes(
    method: str,
    tool_name: str | None,
    protocol_version: str | None,
    network_transport: str | None,
    http_version: str | None,
    peer: tuple[str, str] | None = None,
    outcome: tuple[tuple[str, Any], ...] = (),
) -> dict[str, Any]:
    """The allow-listed, low-cardinality attributes every metric of a request shares, and a verdict's.

    `tool_name` is the request's target: a tool's name, or a prompt's (prompts/get). Never request ids,
    session ids or reasons. Built once per distinct set and shared between records: never mutate the result.
    """
    attributes: dict[str, Any] = {MCP_METHOD_NAME: bounded(method)}
    if method == TOOLS_CALL:
        attributes[GEN_AI_OPERATION_NAME] = GEN_AI_OPERATION_EXECUTE_TOOL
        if tool_name is not None:
            attributes[GEN_AI_TOOL_NAME] = tool_name
    elif method == PROMPTS_GET and tool_name is not None:
        attributes[GEN_AI_PROMPT_NAME] = tool_name
    if protocol_version is not None:
        attributes[MCP_PROTOCOL_VERSION] = bounded(protocol_version)
    if network_transport is not None:
        attributes[NETWORK_TRANSPORT] = network_transport
    if http_version is not None:
        attributes.update(http_protocol(http_version))
    if peer is not None:  # the peer's name, folded (`peers.Peer.metric_attribute`)
        attributes[peer[0]] = peer[1]
    attributes.update(outcome)
    return attributes


def http_protocol(version: str | None) -> dict[str, Any]:
    """network.protocol.name for something that came over HTTP, and its version where known."""
    attributes: dict[str, Any] = {NETWORK_PROTOCOL_NAME: NETWORK_PROTOCOL_HTTP}
    if version is not None:
        attributes[NETWORK_PROTOCOL_VERSION] = version
    return attributes


def camel_case(model: Any) -> dict[str, Any] | None:
    """A pydantic model (tool annotations) as its wire mapping, or None."""
    return None if model is None else model.model_dump(by_alias=True, exclude_none=True)


def captured_content(value: Any) -> str:
    """A tool's arguments or result (a mapping, or a pydantic model) as JSON, cut to MAX_CONTENT_LENGTH."""
    if hasattr(value, "model_dump"):
        value = value.model_dump(by_alias=True, mode="json", exclude_none=True)
    return json.dumps(value, default=repr, ensure_ascii=False)[:MAX_CONTENT_LENGTH]


# The OpenTelemetry exception event's attributes.
EXCEPTION_TYPE = "exception.type"
EXCEPTION_MESSAGE = "exception.message"
EXCEPTION_STACKTRACE = "exception.stacktrace"


def exception_attributes(error: BaseException, with_message: bool) -> dict[str, Any]:
    """The `exception` event of what a tool raised: the exception the user's code raised (the end of its
    `__cause__` chain: frameworks wrap it in their own), its frames (code locations, no values), and its
    message only when content capture is on (a message often quotes the tool's input)."""
    for _ in range(8):  # a chain is short; a cycle is not followed forever
        if error.__cause__ is None:
            break
        error = error.__cause__
    attributes: dict[str, Any] = {
        EXCEPTION_TYPE: exception_type(error)[:MAX_ATTRIBUTE_LENGTH],
        EXCEPTION_STACKTRACE: "".join(traceback.format_tb(error.__traceback__))[-MAX_CONTENT_LENGTH:],
    }
    if with_message:
        attributes[EXCEPTION_MESSAGE] = str(error)[:MAX_ATTRIBUTE_LENGTH]
    return attributes
