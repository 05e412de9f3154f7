"""What the MCP semantic conventions ask of a span or a metric point, checked: each check returns the
differences it found, as sentences, so a failing test lists all of them at once.

The convention's side comes from tests/data/semconv_mcp.yaml (a transcription, with its source); the
plugin's own names and its deliberate deviations from docs/telemetry.md, so the documentation and the
test cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CONVENTION = yaml.safe_load((ROOT / "tests" / "data" / "semconv_mcp.yaml").read_text())
TELEMETRY_DOC = (ROOT / "docs" / "telemetry.md").read_text()

# JSON-RPC codes the convention calls the caller's fault on a server (common.yaml, mcp.server.status).
# The convention's caller faults, and the 2026-07-28 revision's codes that docs/telemetry.md's deviations count
# as the caller's too.
CALLER_FAULT_CODES = {"-32700", "-32600", "-32601", "-32602", "-32002", "-32020", "-32021", "-32022"}
# The first protocol revision without sessions; mcp.session.id MUST NOT be set on it (registry.yaml).
SESSIONLESS_SINCE = "2026-07-28"


def _table(heading: str) -> list[list[str]]:
    """The rows of the first table under a `## heading` of docs/telemetry.md, as lists of cells."""
    section = TELEMETRY_DOC.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def _own_names() -> frozenset[str]:
    """Every name docs/telemetry.md's "Whose names" table gives as this plugin's (ours, or kept in mcp.*)."""
    names: set[str] = set()
    for name_cell, _kind, whose, _why in _table("Conventions"):
        if whose == "ours" or whose.startswith("kept in"):
            names.update(re.findall(r"`([^`]+)`", name_cell))
    return frozenset(names)


OWN_NAMES = _own_names()
DEVIATIONS = frozenset(row[0] for row in _table("Deviations"))
# Names the convention does not have yet, listed as one deviation: accepted on spans and metrics alike.
PROPOSED_NAMES = frozenset(name for row in _table("Deviations") if row[0].startswith("the peers' names")
                           for name in re.findall(r"`([^`]+)`", row[0]))


@dataclass(frozen=True)
class Emitted:
    """A span of ours, from whichever exporter: an SDK span or an OTLP one."""

    kind: str  # SERVER | CLIENT | INTERNAL
    name: str
    attributes: Mapping[str, Any]
    events: tuple[tuple[str, Mapping[str, Any]], ...]
    status: str  # UNSET | OK | ERROR


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    return True


def span_differences(span: Emitted) -> list[str]:
    """How a request or notification span of ours differs from the convention's mcp.client / mcp.server."""
    attributes, where = dict(span.attributes), f"{span.kind} {span.name!r}"
    kind = {"SERVER": "mcp.server", "CLIENT": "mcp.client"}.get(span.kind)
    if kind is None:
        return [f"{where}: an MCP span must be SERVER or CLIENT"]
    convention, found = CONVENTION["spans"][kind], []
    method = attributes.get("mcp.method.name")
    if not isinstance(method, str):
        return [f"{where}: mcp.method.name is required"]
    allowed = {*convention["required"], *convention["conditionally_required"], *convention["recommended"],
               *convention["opt_in"]}
    for key, value in attributes.items():
        if key in allowed:
            if not _type_ok(CONVENTION["attributes"][key]["type"], value):
                found.append(f"{where}: {key}={value!r} is not of type {CONVENTION['attributes'][key]['type']}")
        elif key not in OWN_NAMES | PROPOSED_NAMES and not key.startswith(tuple(convention["opt_in_prefixes"])):
            found.append(f"{where}: {key} is neither the convention's for {kind} nor documented as ours")
    members = CONVENTION["attributes"]["network.transport"]["members"]
    if "network.transport" in attributes and attributes["network.transport"] not in members:
        found.append(f"{where}: network.transport={attributes['network.transport']!r} is not a well-known value")
    is_request = not method.startswith("notifications/")
    if is_request != ("jsonrpc.request.id" in attributes):
        found.append(f"{where}: jsonrpc.request.id is set if and only if it is a request")
    if (attributes.get("gen_ai.operation.name") == "execute_tool") != (method == "tools/call"):
        found.append(f"{where}: gen_ai.operation.name is execute_tool for a tool call, and only then")
    for target_key, target_method in (("gen_ai.tool.name", "tools/call"), ("gen_ai.prompt.name", "prompts/get")):
        if (target_key in attributes) != (method == target_method):
            found.append(f"{where}: {target_key} is set for {target_method}, and only then")
    target = attributes.get("gen_ai.tool.name", attributes.get("gen_ai.prompt.name"))
    if span.name not in (method, f"{method} {target}"):
        found.append(f"{where}: the name is neither {{mcp.method.name}} nor {{mcp.method.name}} {{target}}")
    code = attributes.get("rpc.response.status_code")
    error_type = attributes.get("error.type")
    if code is not None and error_type != code:
        found.append(f"{where}: error.type SHOULD be the JSON-RPC code {code}, not {error_type!r}")
    outcome = attributes.get("tool.outcome")
    failed = outcome == "failed" or code is not None or span.status == "ERROR"
    timed_out = span.kind == "CLIENT" and outcome == "cancelled" and error_type == "timeout"
    if failed != (error_type is not None) and not timed_out:
        found.append(f"{where}: error.type is set if and only if the operation failed (or a client timed out)")
    if span.status == "ERROR" and error_type is None:
        found.append(f"{where}: an ERROR status without error.type")
    unset_with_error = span.status != "ERROR" and error_type is not None
    if unset_with_error and not (timed_out or (span.kind == "SERVER" and code in CALLER_FAULT_CODES)):
        found.append(f"{where}: error.type={error_type!r} with status {span.status} is not a listed deviation")
    for event, event_attributes in span.events:
        if event != "exception" and event not in OWN_NAMES:
            found.append(f"{where}: event {event} is neither OpenTelemetry's nor documented as ours")
        for key in event_attributes:
            if not key.startswith("exception.") and key not in OWN_NAMES and key not in allowed:
                found.append(f"{where}: event attribute {key} is not documented")
    version = attributes.get("mcp.protocol.version")
    if "mcp.session.id" in attributes and isinstance(version, str) and version >= SESSIONLESS_SINCE:
        found.append(f"{where}: mcp.session.id MUST NOT be set on the {version} revision")
    return found


def metric_differences(name: str, instrument: str, unit: str, bounds: list[float] | None,
                       attributes: Mapping[str, Any]) -> list[str]:
    """How one point of a metric of ours differs from the convention's definition of that metric."""
    convention = CONVENTION["metrics"].get(name)
    if convention is None:
        return [] if name in OWN_NAMES else [f"metric {name}: neither the convention's nor documented as ours"]
    found = []
    if (instrument, unit) != (convention["instrument"], convention["unit"]):
        found.append(f"metric {name}: {instrument} in {unit!r}, not {convention['instrument']} in "
                     f"{convention['unit']!r}")
    session_buckets = name.endswith(".session.duration") and "session-duration buckets" in DEVIATIONS
    if bounds is not None and list(bounds) != list(convention["buckets"]) and not session_buckets:
        found.append(f"metric {name}: buckets {list(bounds)} are not the convention's")
    for key in convention["required"]:
        if key not in attributes:
            found.append(f"metric {name}: {key} is required")
    method = attributes.get("mcp.method.name")
    for target_key, target_method in (("gen_ai.tool.name", "tools/call"), ("gen_ai.prompt.name", "prompts/get")):
        if method == target_method and target_key not in attributes:
            found.append(f"metric {name}: {target_key} is conditionally required for {target_method}")
    for key in attributes:
        if key not in convention["allowed"] and key not in OWN_NAMES | PROPOSED_NAMES:
            opt_in = " (opt-in only)" if key in convention["opt_in"] else ""
            found.append(f"metric {name}: attribute {key}{opt_in} is not the convention's, nor documented as ours")
    return found
