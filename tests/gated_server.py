"""A stock high-level server (MCPServer on 2.x, FastMCP on 1.x; standalone FastMCP when GATED_FRAMEWORK is
`fastmcp`, the SDK's low-level Server when it is `lowlevel`, stdio only) with no telemetry code, run as a
subprocess under `opentelemetry-instrument`.

Writes are gated inside the server so a test can order a race through the
protocol itself: `wait_started` returns once a write has begun, `release` lets
it finish. Usage: python gated_server.py VAULT_DIR [stdio | streamable-http PORT | sse PORT]
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import anyio

if os.environ.get("GATED_SERVER_OWN_TELEMETRY"):
    # A span and a point of its own, through whatever providers opentelemetry-instrument set: with the plugin
    # disabled, the SDK alone then holds spans and points as it does with the plugin (on mcp 1.x, which has
    # no spans of its own, too). tests/test_exit.py's baseline.
    from opentelemetry import metrics, trace

    trace.get_tracer("gated-server").start_span("gated-server started").end()
    metrics.get_meter("gated-server").create_counter("gated_server.started").add(1)

if os.environ.get("GATED_SERVER_SENTRY"):
    # Sentry's MCP integration beside ours, as a user runs both (tests/test_cotenancy.py, docs/co-tenancy.md): it
    # patches the SDK's server classes as it starts. Its events go to a DSN nothing listens on.
    import sentry_sdk
    from sentry_sdk.integrations.mcp import MCPIntegration

    sentry_sdk.init(dsn="http://public@127.0.0.1:9/1", integrations=[MCPIntegration()], traces_sample_rate=1.0,
                    shutdown_timeout=0)
    print(f"Sentry's MCPIntegration on: {sentry_sdk.get_client().get_integration(MCPIntegration) is not None}",
          file=sys.stderr)

if os.environ.get("GATED_SERVER_LOGFIRE"):
    # logfire's MCP instrumentation beside ours (mcp 1.x; on 2.x it does nothing): `configure()` first, as its
    # docs say, sending nowhere; it keeps the providers opentelemetry-instrument set, and patches the SDK's
    # session and server classes by assignment.
    import logfire

    logfire.configure(send_to_logfire=False, console=False)
    logfire.instrument_mcp()
    from mcp.server import Server

    patched = "logfire" in Server._handle_request.__code__.co_filename
    print(f"logfire's instrument_mcp on: {patched}", file=sys.stderr)

if os.environ.get("GATED_SERVER_DDTRACE"):
    # Datadog's MCP integration beside ours (mcp 1.x): it wraps the SDK's session and responder methods with
    # wrapt, as `ddtrace-run` would. Its traces go to a stand-in for the host's local agent, in this process:
    # with no agent to reach, its exit hook retries for seconds, longer than a host waits (docs/co-tenancy.md).
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class _Agent(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_POST = do_PUT

        def log_message(self, *args: object) -> None:
            pass

    agent = ThreadingHTTPServer(("127.0.0.1", 0), _Agent)
    threading.Thread(target=agent.serve_forever, daemon=True).start()
    os.environ["DD_TRACE_AGENT_URL"] = f"http://127.0.0.1:{agent.server_port}"
    import ddtrace

    ddtrace.patch(mcp=True)
    import mcp

    print(f"ddtrace's mcp integration on: {getattr(mcp, '__datadog_patch', False)}", file=sys.stderr)

vault = Path(sys.argv[1])
transport = sys.argv[2] if len(sys.argv) > 2 else "stdio"
port = int(sys.argv[3]) if len(sys.argv) > 3 else 0
try:
    from mcp_types import ToolAnnotations
except ImportError:  # mcp 1.x
    from mcp.types import ToolAnnotations
if os.environ.get("GATED_FRAMEWORK") == "fastmcp":
    from fastmcp import FastMCP as Standalone

    server = Standalone("gated-notes")
    network = {"host": "127.0.0.1", "port": port}
elif os.environ.get("GATED_FRAMEWORK") == "lowlevel":  # the SDK's low-level Server, its handlers by hand (stdio)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.lowlevel_framework import LowLevelApp

    server = LowLevelApp("gated-notes")
    network = {}
else:
    try:
        from mcp.server.mcpserver import MCPServer

        server = MCPServer("gated-notes")
        network = {"host": "127.0.0.1", "port": port}  # 2.x takes them when it runs
        if transport == "streamable-http" and os.environ.get("GATED_SERVER_JSON"):
            network["json_response"] = True  # answers in JSON, never SSE
    except ImportError:  # mcp 1.x
        from mcp.server.fastmcp import FastMCP

        server = FastMCP("gated-notes", host="127.0.0.1", port=port)
        network = {}
started = anyio.Event()
release_async = anyio.Event()
release_thread = threading.Event()


@server.tool()
def echo(text: str) -> str:
    return text


@server.tool()
def broken(text: str) -> str:
    raise ValueError("the tool failed")


@server.tool()
async def slow(text: str) -> str:
    started.set()
    await release_async.wait()
    return text


hanging = 0  # calls of `hang` running: the server's own count, on every transport and entry


@server.tool()
async def hang() -> str:
    """Never returns: its caller's own timeout gives up on it."""
    global hanging
    hanging += 1
    try:
        await anyio.Event().wait()
    finally:
        hanging -= 1
    return "never"


# A write that is not idempotent: its ghost is `unsafe`.
@server.tool(annotations=ToolAnnotations.model_validate({"readOnlyHint": False, "idempotentHint": False}))
async def shielded_write(name: str) -> str:
    started.set()
    with anyio.CancelScope(shield=True):  # a commit is never left half-done
        await release_async.wait()
        (vault / name).write_text("written")
    return f"wrote {name}"


@server.tool()
def sync_write(name: str) -> str:
    """A worker-thread tool on 2.x (FastMCP 1.x runs sync tools on the event loop; not used there)."""
    anyio.from_thread.run_sync(started.set)
    release_thread.wait(60)
    (vault / name).write_text("written")
    return f"wrote {name}"


def _write_when_let_go(name: str, gate: str) -> str:
    """A write in a worker thread, let go by the thread gate, or (`gate`: a FIFO's path) by a test that opens the
    FIFO and closes it: a write that can be let go after the server's stdin has closed."""
    anyio.from_thread.run_sync(started.set)
    if gate:
        with open(gate) as fifo:  # blocks until the test opens the other end
            fifo.read()
    else:
        release_thread.wait(60)
    (vault / name).write_text("written")
    return f"wrote {name}"


@server.tool()
async def threaded_write(name: str, gate: str = "") -> str:
    """Blocking work handed to a worker thread, which nothing interrupts, on every line and framework."""
    return await anyio.to_thread.run_sync(_write_when_let_go, name, gate)


@server.tool(annotations=ToolAnnotations.model_validate({"readOnlyHint": False, "idempotentHint": False}))
async def blocking_insert(row: str) -> str:
    """Synchronous work inside an `async` tool, as many published servers do (sqlite, a subprocess): the event
    loop is blocked until the test opens VAULT/gate (a FIFO, while there is one), so the cancel its caller sends
    meanwhile is read only after the answer is written."""
    (vault / "blocking").write_text("started")
    if (vault / "gate").exists():
        with open(vault / "gate") as fifo:  # blocks the event loop until the test opens the other end
            fifo.read()
    with open(vault / "rows", "a") as rows:
        rows.write(row + "\n")
    return f"inserted {row}"


@server.tool()
def process_state() -> str:
    """A test's probe: what this serving process has for SIGTERM and for anyio's file methods."""
    import json
    import signal

    return json.dumps({"sigterm": str(signal.getsignal(signal.SIGTERM)),
                       "anyio": [type(vars(anyio.AsyncFile)[name]).__name__ for name in ("write", "flush")]})


@server.tool()
async def wait_started() -> str:
    await started.wait()
    return "started"


def _in_flight(tool: str, *, caller_gone: bool = False, cancelled: bool = False) -> bool:
    """Whether the plugin (loaded by `opentelemetry-instrument`) holds a call of `tool` in flight, and has noticed
    its caller hung up, or read its cancel, when asked."""
    from otel_mcp_cancel.request_state import LIVE

    return any(record.target == tool and (record.caller_gone or not caller_gone)
               and (record.cancelled or not cancelled) for record in list(LIVE._records.values()))


@server.tool()
def caller_gone(tool: str) -> str:
    """A test's probe, to order a race: whether the caller of a call of `tool` still in flight hung up."""
    return "gone" if _in_flight(tool, caller_gone=True) else "here"


@server.tool()
def cancel_read(tool: str) -> str:
    """A test's probe, to order a race: whether the plugin read a cancel of a call of `tool` still in flight."""
    return "read" if _in_flight(tool, cancelled=True) else "not yet"


@server.tool()
def in_flight(tool: str) -> str:
    """A test's probe, to order a race: whether a call of `hang` is running (the server's own count: the
    2026-07-28 single-exchange HTTP entry serves a request the plugin holds nowhere a probe can look)."""
    return "yes" if tool == "hang" and hanging else "no"


@server.tool()
def release() -> str:
    release_async.set()
    release_thread.set()
    return "released"


if __name__ == "__main__":
    if transport == "stdio":
        server.run()
    else:
        server.run(transport, **network)
