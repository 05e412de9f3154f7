"""What the plugin reads of the ASGI server that serves a streamable HTTP app, besides the SDK: uvicorn's request
cycle, met behind the `receive` the session manager is handed, never imported for it (`reach.MetAttribute`)."""

from __future__ import annotations

from otel_mcp_cancel.hooks.capabilities import EXCHANGE_DELIVERY
from otel_mcp_cancel.hooks.reach import MetAttribute, Reach

# Set as the caller's connection closes; its `send` then drops what it is given.
uvicorn_disconnected = MetAttribute(EXCHANGE_DELIVERY, "uvicorn.", "disconnected")
# Its connection's asyncio transport, whose socket shows a caller's close before uvicorn's loop has read it.
uvicorn_transport = MetAttribute(EXCHANGE_DELIVERY, "uvicorn.", "transport")

SERVERS: list[Reach] = [uvicorn_disconnected, uvicorn_transport]
