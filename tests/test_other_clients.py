"""Clients in other languages than Python against a server under the plugin: the TypeScript SDK's (what desktop
hosts and IDEs are built on, tests/clients/ts_client.mjs) and the Go SDK's (tests/clients/go, which opens with
`server/discover`), each over stdio and streamable HTTP. What the server's spans say of each call is compared
with what the client saw. Skipped where node and the TypeScript SDK (`npm install` in tests/clients/) or Go are
missing; under CI (which installs them) a failure instead."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.version import Version

from examples.otlp_sink import OtlpSink, exporter_environment
from tests.subprocess_servers import HttpServer, go_program, instrumented_command, require
from tests.support import MCP_MAJOR, until

CLIENTS = Path(__file__).resolve().parent / "clients"
SCOPE = "otel_mcp_cancel"

# What the client saw of each call, and what the server's span must say of it.
SEEN = {"echo": "result", "broken": "isError", "abort": "aborted", "timeout": "timeout", "ghost": "aborted",
        "retry": "result"}


def node_client() -> list[str]:
    node = require("node", shutil.which("node"), "install Node.js")
    require("the TypeScript MCP SDK", (CLIENTS / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir(),
            "npm install in tests/clients (.ci/run does)")
    return [node, str(CLIENTS / "ts_client.mjs")]


def go_client() -> list[str]:
    return [str(go_program("."))]


# Each client: how to run it, and the cancel reasons it sends for an abort and for its own timeout.
CLIENT_PROGRAMS = {
    "typescript": (node_client, {"the user pressed stop", "McpError: MCP error -32001: Request timed out"}),
    "go": (go_client, {"context canceled", "context deadline exceeded"}),
}


# The Go SDK sends a cancel's notification from a goroutine of its own unless told to send it before the
# cancelled call returns: then what the server reads of the client's next call is ordered by the client's code.
CLIENT_ENVIRONMENTS = {"typescript": {}, "go": {"MCPGODEBUG": "blockingcancelnotify=1"}}


def run_client(client: str, *arguments: str, environment: dict[str, str]) -> dict[str, str]:
    program, _ = CLIENT_PROGRAMS[client]
    done = subprocess.run([*program(), *arguments], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **CLIENT_ENVIRONMENTS[client], **environment})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def tools_calls(sink: OtlpSink) -> list:
    return [span for span in sink.server_spans(SCOPE) if span.attributes["mcp.method.name"] == "tools/call"]


def called(sink: OtlpSink) -> Counter:
    """Each tool's calls, but the client's probes of the server (asked as often as it takes)."""
    probes = Counter(cancel_read=1_000_000, in_flight=1_000_000)
    return Counter(span.attributes["gen_ai.tool.name"] for span in tools_calls(sink)) - probes


CALLED = Counter(echo=1, broken=1, hang=2, shielded_write=2, wait_started=1, release=1)


def check_the_servers_spans_against_what_the_client_saw(
    sink: OtlpSink, client: str, seen: dict[str, str], *, steps: dict[str, str] = SEEN,
    reasons: set[str | None] | None = None
) -> None:
    """`steps`: what the client must have seen (the ghost and its retry among them, or not); `reasons`: the
    cancel texts the server may have read, if not exactly those the client sends."""
    assert seen == steps
    calls = {}
    for span in tools_calls(sink):
        calls.setdefault(span.attributes["gen_ai.tool.name"], []).append(span)
    (broken,) = calls["broken"]
    echoes = 2 if seen.get("after_cancels") == "result" else 1
    assert [span.attributes["tool.outcome"] for span in calls["echo"]] == ["ok"] * echoes
    assert broken.attributes["tool.outcome"] == "failed"
    assert broken.attributes["error.type"] == "tool_error"
    # The abort and the client's own timeout: both cancelled, never failed, with what the client said why.
    hangs = calls["hang"]
    assert [span.attributes["tool.outcome"] for span in hangs] == ["cancelled", "cancelled"]
    assert all("error.type" not in span.attributes for span in hangs)
    read = [attributes.get("tool.cancel_message") for span in hangs for name, attributes in span.events
            if name == "tool.request_cancelled"]
    assert len(read) == 2
    if reasons is None:
        assert set(read) == CLIENT_PROGRAMS[client][1]
    else:
        assert set(read) <= reasons
    if "ghost" not in steps:
        return
    # The ghost, and the retry the client made of a write it was told was cancelled.
    ghost_span, retry = sorted(calls["shielded_write"], key=lambda span: span.start_ns)
    assert {key: ghost_span.attributes.get(key) for key in ("tool.outcome", "tool.handler_outcome",
                                                            "tool.ghost_risk")} \
        == {"tool.outcome": "cancelled", "tool.handler_outcome": "ok", "tool.ghost_risk": "unsafe"}
    assert (retry.attributes["tool.outcome"], retry.attributes["tool.retried_ghost_risk"]) == ("ok", "unsafe")
    assert retry.links == [ghost_span.span_id]
    # The client sends no trace context: each call's server span is the root of a trace of its own, or, where
    # logfire's instrument_mcp() serves the request inside a span of its own, that span's child (one each).
    parents = [span.parent_span_id for span in tools_calls(sink)]
    if os.environ.get("GATED_SERVER_LOGFIRE") and MCP_MAJOR == 1:
        assert "" not in parents and len(set(parents)) == len(parents), parents
    else:
        assert set(parents) == {""}


@pytest.mark.anyio
@pytest.mark.parametrize("client", CLIENT_PROGRAMS)
async def test_a_client_in_another_language_over_stdio(client: str, sink: OtlpSink, tmp_path: Path) -> None:
    command = instrumented_command(tmp_path)
    seen = run_client(client, "stdio", str(tmp_path), *command, environment=exporter_environment(sink.endpoint))
    await until(lambda: called(sink) == CALLED, seconds=30)
    check_the_servers_spans_against_what_the_client_saw(sink, client, seen)
    if client == "go":  # it asks `server/discover` first: mcp 2.x serves it, 1.x refuses it (then it initializes)
        (discover,) = [span for span in sink.server_spans(SCOPE) if span.name == "server/discover"]
        assert discover.attributes.get("error.type") == (None if MCP_MAJOR == 2 else "-32602")


@pytest.mark.anyio
@pytest.mark.parametrize("client", CLIENT_PROGRAMS)
async def test_a_client_in_another_language_over_streamable_http(client: str, sink: OtlpSink, tmp_path: Path) -> None:
    """The Go SDK's client speaks 2026-07-28 where the server does (mcp 2.x): each call is a request of its own
    (the single-exchange entry), and a call is cancelled by closing its request: `cancelled`, with no text. It
    also posts `notifications/cancelled` (before the cancelled call returns: `CLIENT_ENVIRONMENTS`): mcp 2.1 and
    later acknowledge and drop it, and the client's next call is served; mcp 2.0 refuses it (400), and the client
    closes itself at its first cancel. There, when the server noticed a caller
    leave cannot be probed, so the ghost is not run. Against a server of sessions (mcp 1.x) it closes the call's
    stream and posts the cancel: the server reads whichever comes first, so the text is there or not."""
    server = HttpServer(sink.endpoint, tmp_path, "streamable-http")
    try:
        seen = run_client(client, "http", str(tmp_path), f"http://127.0.0.1:{server.port}/mcp", environment={})
    finally:
        server.stop()
    single_exchange = {span.attributes.get("mcp.protocol.version") for span in tools_calls(sink)} == {"2026-07-28"}
    if client == "typescript":
        assert called(sink) == CALLED
        check_the_servers_spans_against_what_the_client_saw(sink, client, seen)
    elif single_exchange and Version(version("mcp")) >= Version("2.1"):
        steps = {**{step: saw for step, saw in SEEN.items() if step not in ("ghost", "retry")},
                 "after_cancels": "result"}
        assert called(sink) == Counter(echo=2, broken=1, hang=2)
        check_the_servers_spans_against_what_the_client_saw(sink, client, seen, steps=steps, reasons={None})
    elif single_exchange:
        # mcp 2.0 refuses the first cancel's notification (400): the client closes, and calls nothing more.
        closed = ('error connection closed: calling "tools/call": client is closing: sending '
                  '"notifications/cancelled": Bad Request')
        assert seen == {"echo": "result", "broken": "isError", "abort": "aborted", "timeout": closed,
                        "after_cancels": closed}
        assert called(sink) == Counter(echo=1, broken=1, hang=1)
        (hang,) = [span for span in tools_calls(sink) if span.attributes["gen_ai.tool.name"] == "hang"]
        assert hang.attributes["tool.outcome"] == "cancelled" and "error.type" not in hang.attributes
        assert [name for name, _ in hang.events] == ["tool.request_cancelled"]
    else:
        assert called(sink) == CALLED
        check_the_servers_spans_against_what_the_client_saw(
            sink, client, seen, reasons={None, *CLIENT_PROGRAMS[client][1]})
