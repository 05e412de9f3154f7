"""The server `benchmarks/load.py` puts under load: one trivial tool, in one telemetry mode, over stdio or
streamable HTTP (JSON answers, a session per client, served by uvicorn in this process).

    python load_server.py MODE OTLP_ENDPOINT stdio
    python load_server.py MODE OTLP_ENDPOINT http PORT
    LOAD_DROP_SPANS=1 python load_server.py ...   # spans are dropped, not exported (see `configs.providers`)

MODE: `plain` (no telemetry), `sdk` (SDK providers: on mcp 2.x its own spans, on 1.x nothing records),
`plugin` (those providers and otel-mcp-cancel), `floor` (the same providers, not global, so that mcp 2.x's own
spans stay off, and around the tools/call handler the SDK's own calls for what the plugin records per call: a
SERVER span with the attributes ours carry, current while it is open, its outcome, one duration record in its
context). Runs with either mcp line (FastMCP on 1.x).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from configs import apply  # noqa: E402

try:
    from mcp.server.mcpserver import MCPServer as HighLevelServer

    MCP_MAJOR = 2
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as HighLevelServer

    MCP_MAJOR = 1

DROP_SPANS = os.environ.get("LOAD_DROP_SPANS") == "1"


def floor_around(handler: Callable[..., Any], endpoint: str) -> Callable[..., Any]:
    from configs import providers
    from opentelemetry.context import attach, detach
    from opentelemetry.trace import SpanKind, set_span_in_context

    tracer_provider, meter_provider = providers(endpoint, DROP_SPANS)
    tracer = tracer_provider.get_tracer("floor")
    duration = meter_provider.get_meter("floor").create_histogram("mcp.server.operation.duration", unit="s")
    request_ids = iter(range(1 << 62))
    started = {"mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "echo",
               "network.transport": "pipe"}
    outcome = {"mcp.protocol.version": "2025-06-18", "tool.outcome": "ok"}
    metric = {"mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "echo",
              **outcome}

    async def served(*args: Any, **kwargs: Any) -> Any:
        begun = time.perf_counter()
        span = tracer.start_span("tools/call echo", kind=SpanKind.SERVER,
                                 attributes={**started, "jsonrpc.request.id": str(next(request_ids))})
        token = attach(set_span_in_context(span))
        try:
            return await handler(*args, **kwargs)
        finally:
            span.set_attributes(outcome)
            duration.record(time.perf_counter() - begun, metric)
            span.end()
            detach(token)

    return served


def with_floor(server: Any, endpoint: str) -> None:
    lowlevel = server._lowlevel_server if MCP_MAJOR == 2 else server._mcp_server
    if MCP_MAJOR == 2:
        entry = lowlevel._request_handlers["tools/call"]
        lowlevel._request_handlers["tools/call"] = type(entry)(entry.params_type, floor_around(entry.handler, endpoint))
    else:
        import mcp.types

        handlers = lowlevel.request_handlers
        handlers[mcp.types.CallToolRequest] = floor_around(handlers[mcp.types.CallToolRequest], endpoint)


def main() -> None:
    mode, endpoint, transport, *port = sys.argv[1:]
    if mode != "floor":
        apply({"plain": "none", "sdk": "sdk", "plugin": "plugin"}[mode], endpoint, DROP_SPANS)
    server = HighLevelServer("load") if MCP_MAJOR == 2 else HighLevelServer("load", json_response=True)

    @server.tool()
    async def echo(text: str) -> str:
        return text

    if mode == "floor":
        with_floor(server, endpoint)
    if transport == "stdio":
        server.run()
        return
    import uvicorn

    app = server.streamable_http_app(json_response=True) if MCP_MAJOR == 2 else server.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=int(port[0]), log_level="warning")


if __name__ == "__main__":
    main()
