"""Beside the other instrumentations a process already runs (docs/co-tenancy.md). `opentelemetry-instrument` stops
loading instrumentors at the first whose `instrument()` raises, as Traceloop's does on mcp 2.x: ours is loaded
ahead of every instrumentor (`early_load`), so another's failure never leaves MCP uninstrumented; and the documented
remedy, turning the failing one off, still works. Here with an instrumentor that fails as Traceloop's does, listed
ahead of ours; with Traceloop itself where it is installed (the CI environment that installs it requires it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from examples.otlp_sink import OtlpSink, exporter_environment
from tests.subprocess_servers import call_over_pipe, instrumented_command, send_line
from tests.support import until

pytestmark = pytest.mark.anyio

FAILING = "failing_instrumentation"
# Set in the child that runs a test which leaves another instrumentation's wrappers behind.
IN_A_PROCESS_OF_ITS_OWN = "COTENANCY_IN_A_PROCESS_OF_ITS_OWN"
REQUIRED = set(os.environ.get("COTENANCY_REQUIRED", "").split(","))  # in CI's environments that install them
TRACELOOP_REQUIRED = "traceloop" in REQUIRED
# Traceloop's entry point off, where a test is about another instrumentation alone.
TRACELOOP_OFF = {"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "mcp"}


def failing_instrumentor(tmp_path: Path) -> Path:
    """A distribution on its own path entry, ahead of site-packages (so its entry point is loaded before ours),
    whose instrumentor raises as it instruments: what Traceloop's 0.62.4 does on mcp 2.x."""
    root = tmp_path / "failing"
    info = root / f"{FAILING}-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {FAILING}\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[opentelemetry_instrumentor]\nfailing = {FAILING}:Failing\n")
    (root / f"{FAILING}.py").write_text(
        "from opentelemetry.instrumentation.instrumentor import BaseInstrumentor\n\n\n"
        "class Failing(BaseInstrumentor):\n"
        "    def instrumentation_dependencies(self):\n        return []\n\n"
        "    def _instrument(self, **kwargs):\n        raise AttributeError('streamablehttp_client is gone')\n\n"
        "    def _uninstrument(self, **kwargs):\n        pass\n")
    return root


def serve_one_call(tmp_path: Path, sink: OtlpSink, environment: dict[str, str]) -> str:
    """The gated server over stdio under `opentelemetry-instrument` with `environment`: one tools/call, then its
    caller leaves. Returns what the process logged on stderr."""
    process = subprocess.Popen(instrumented_command(tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **exporter_environment(sink.endpoint), **environment})
    try:
        send_line(process, {"id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "host", "version": "0"}}})
        assert json.loads(process.stdout.readline())["id"] == 0
        send_line(process, {"method": "notifications/initialized"})
        assert "error" not in call_over_pipe(process, 1, "echo", {"text": "hi"})
        process.stdin.close()  # its caller leaves: it exits, exporting what it has
        process.wait(timeout=60)
        return process.stderr.read()
    finally:
        process.kill()


def off(path: str, instrumentations: str) -> dict[str, str]:
    return {"PYTHONPATH": path, "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": instrumentations}


def our_calls(sink: OtlpSink) -> list[str]:
    return [span.attributes["tool.outcome"] for span in sink.server_spans("otel_mcp_cancel")
            if span.name == "tools/call echo"]


async def test_an_instrumentor_that_fails_ahead_of_ours_does_not_stop_ours(tmp_path: Path, sink: OtlpSink) -> None:
    path = os.pathsep.join(filter(None, [str(failing_instrumentor(tmp_path)), os.environ.get("PYTHONPATH")]))
    # The symptom: the loader stops at the failing instrumentor ("Instrumenting of failing failed"): ours was
    # loaded ahead of it, and the call has its span and outcome.
    # Traceloop's own entry point (`mcp`), where it is installed, is off here: this is about the loader.
    stderr = serve_one_call(tmp_path, sink, off(path, "mcp"))
    assert "Instrumenting of failing failed" in stderr
    await until(lambda: our_calls(sink) == ["ok"], seconds=30)
    # The remedy the docs give: the failing one turned off. Nothing fails; ours is there as before.
    stderr = serve_one_call(tmp_path, sink, off(path, "mcp,failing"))
    assert "Instrumenting of failing failed" not in stderr
    await until(lambda: our_calls(sink) == ["ok", "ok"], seconds=30)
    # Ours turned off is off, ahead of the loader too (the process has exported everything as it exited).
    serve_one_call(tmp_path, sink, off(path, "mcp,failing,mcp_cancel"))
    assert our_calls(sink) == ["ok", "ok"]


@pytest.mark.skipif(find_spec("opentelemetry.instrumentation.mcp") is None and not TRACELOOP_REQUIRED,
                    reason="Traceloop's opentelemetry-instrumentation-mcp is not installed")
async def test_beside_traceloop(tmp_path: Path, sink: OtlpSink) -> None:
    """On mcp 1.x, Traceloop's hooks and ours both work: ours records the call, and finds the stdio transport
    Traceloop wrapped. On mcp 2.x Traceloop's instrumentor fails while it imports mcp, and the half-done import
    it leaves behind is not one ours can hook (docs/co-tenancy.md): the documented remedy, turning it off,
    gives ours back whole."""
    from importlib.metadata import version

    from tests.support import MCP_MAJOR

    if MCP_MAJOR == 1:
        stderr = serve_one_call(tmp_path, sink, {})
        await until(lambda: our_calls(sink) == ["ok"], seconds=30)
        assert "otel_mcp_cancel" not in stderr, stderr  # no capability of ours lost beside it
        # And Traceloop's still make what they make: a span for each message its stream writer sends.
        assert any(span.scope.startswith("opentelemetry.instrumentation.mcp") and span.name == "ResponseStreamWriter"
                   for span in sink.spans)
        return
    stderr = serve_one_call(tmp_path, sink, {})
    assert "Instrumenting of mcp failed" in stderr, (version("opentelemetry-instrumentation-mcp"), stderr)
    stderr = serve_one_call(tmp_path, sink, {"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "mcp"})
    assert "Instrumenting of mcp failed" not in stderr and "otel_mcp_cancel" not in stderr, stderr
    await until(lambda: our_calls(sink)[-1:] == ["ok"], seconds=30)


# Instrumentations a test's server starts itself (tests/gated_server.py): the module that must be there, the
# variable that starts it, what the server prints once it is on, and the mcp lines it hooks.
STARTED_IN_THE_SERVER = {
    "sentry": ("sentry_sdk", "GATED_SERVER_SENTRY", "Sentry's MCPIntegration on: True", (1, 2)),
    "logfire": ("logfire", "GATED_SERVER_LOGFIRE", "logfire's instrument_mcp on: True", (1,)),  # 2.x: only warns
    "ddtrace": ("ddtrace", "GATED_SERVER_DDTRACE", "ddtrace's mcp integration on: True", (1,)),
}


@pytest.mark.parametrize("other", sorted(STARTED_IN_THE_SERVER))
async def test_beside_an_instrumentation_the_server_starts(other: str, tmp_path: Path, sink: OtlpSink) -> None:
    """Sentry's MCPIntegration patches the SDK's server classes as it starts; logfire's `instrument_mcp()`
    replaces its server and session methods by assignment, around ours; ddtrace's wraps its session and
    responder methods, `respond` among them, which ours guards. Ours records the call as without them, and
    loses no capability. (CI runs the whole suite with them on in every server: GATED_SERVER_*.)"""
    from tests.support import MCP_MAJOR

    module, variable, on, lines = STARTED_IN_THE_SERVER[other]
    if find_spec(module) is None and other not in REQUIRED:
        pytest.skip(f"{module} is not installed")
    if MCP_MAJOR not in lines:
        pytest.skip(f"{other} hooks mcp {' and '.join(f'{line}.x' for line in lines)} only")
    stderr = serve_one_call(tmp_path, sink, {variable: "1", **TRACELOOP_OFF})
    assert on in stderr, stderr
    await until(lambda: our_calls(sink) == ["ok"], seconds=30)
    assert "otel_mcp_cancel" not in stderr, stderr


@pytest.mark.skipif(find_spec("opentelemetry.instrumentation.mcp") is None and not TRACELOOP_REQUIRED,
                    reason="Traceloop's opentelemetry-instrumentation-mcp is not installed")
def test_in_one_process_both_record_and_either_can_leave_first() -> None:
    """Traceloop's and ours instrumented in one process (mcp 1.x, where Traceloop's works), in a process of its
    own: Traceloop's `uninstrument()` removes its stdio transports' wrappers and leaves its others (around
    `BaseSession.send_request` among them), which would change every later test's client."""
    from tests.support import MCP_MAJOR

    if MCP_MAJOR == 2:
        pytest.skip("Traceloop's instrumentor fails on mcp 2.x (test_beside_traceloop)")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           f"{__file__}::{test_beside_traceloop_in_this_process.__name__}"],
                          env={**os.environ, IN_A_PROCESS_OF_ITS_OWN: "1"}, capture_output=True, text=True,
                          timeout=110)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.skipif(not os.environ.get(IN_A_PROCESS_OF_ITS_OWN), reason="run by the test above, in a child")
async def test_beside_traceloop_in_this_process(captured) -> None:
    """Each makes its spans, ours with the outcome; Traceloop's uninstrumented first leaves ours whole, and ours
    uninstrumented leaves Traceloop's still making its own. What Traceloop does to the caller is its own: a call
    that times out raises `AttributeError` in the caller instead of `McpError` (its wrapper of `send_request`
    swallows the error and returns None), and ours still records that call as cancelled, for a timeout."""
    from opentelemetry.instrumentation.mcp import McpInstrumentor

    from otel_mcp_cancel import McpCancelInstrumentor
    from tests.conftest import TRACER_PROVIDER
    from tests.raw_peer import served_in_memory
    from tests.sdk_client import sdk_client
    from tests.servers import Gates, notes_server

    async def one_call(text: str) -> None:
        async with sdk_client(served_in_memory(notes_server(Gates()))) as client:
            await client.call_tool("echo", {"text": text})

    def ours_named(name: str) -> list[Any]:
        return [s for s in captured.spans.get_finished_spans()
                if s.instrumentation_scope.name == "otel_mcp_cancel" and s.name == name]

    def made() -> tuple[list[tuple[str, str]], int]:
        ours = [(s.kind.name, s.attributes["tool.outcome"]) for s in ours_named("tools/call echo")]
        theirs = [s for s in captured.spans.get_finished_spans()
                  if s.instrumentation_scope.name.startswith("opentelemetry.instrumentation.mcp")]
        captured.spans.clear()
        return sorted(ours), len(theirs)

    theirs = McpInstrumentor()
    theirs.instrument(tracer_provider=TRACER_PROVIDER)
    await one_call("both")
    # Both inject trace context into `_meta`: the server's span is still the child of our client's, once.
    (client_span,), (server_span,) = ([s for s in ours_named("tools/call echo") if s.kind.name == kind]
                                      for kind in ("CLIENT", "SERVER"))
    assert server_span.parent.span_id == client_span.context.span_id
    ours, their_spans = made()
    assert ours == [("CLIENT", "ok"), ("SERVER", "ok")] and their_spans > 0

    async with sdk_client(served_in_memory(notes_server(Gates()))) as client:
        with pytest.raises(AttributeError, match="isError"):
            await client.call_tool("slow", {"text": "never"}, timeout=0.05)

    def timed_out() -> list[tuple[str, str]]:
        return [(s.attributes["tool.outcome"], s.attributes["tool.cancel_reason"])
                for s in ours_named("tools/call slow") if s.kind.name == "CLIENT"]

    await until(lambda: timed_out() != [])
    assert timed_out() == [("cancelled", "timeout")]
    made()

    theirs.uninstrument()
    await one_call("ours")
    assert made()[0] == [("CLIENT", "ok"), ("SERVER", "ok")]
    theirs.instrument(tracer_provider=TRACER_PROVIDER)
    McpCancelInstrumentor().uninstrument()
    await one_call("theirs")
    ours, their_spans = made()
    assert ours == [] and their_spans > 0
