"""Where a client's streams lead, so its spans can say `network.transport`, `server.address`, `server.port`.

mcp's transport helpers (`stdio_client`, `streamable_http_client`, `sse_client`, ...) are wrapped wherever
mcp binds them; the write stream each yields is remembered, with its destination, until the helper's
context exits. A session sending on that stream looks its destination up.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from otel_mcp_cancel.conventions import (
    NETWORK_TRANSPORT,
    NETWORK_TRANSPORT_PIPE,
    NETWORK_TRANSPORT_TCP,
    SERVER_ADDRESS,
    SERVER_PORT,
)
from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.hooks.reach import Local
from otel_mcp_cancel.hooks.wrapping import Hook

_HELPERS = ("stdio_client", "streamable_http_client", "streamablehttp_client", "sse_client")
# Modules that bind the helpers by name; which ones do varies between releases of both lines.
_BINDINGS = (
    "mcp",
    "mcp.client.stdio",
    "mcp.client.client",
    "mcp.client.session_group",
    "mcp.client.streamable_http",
    "mcp.client.sse",
)
_DEFAULT_PORTS = {"http": 80, "https": 443}

_open: dict[int | None, tuple[Any, dict[str, Any], Callable[[], object] | None]] = {}
_lock = threading.Lock()


def transport_hooks(wrapper: Callable[[Any, Any, Any, Any], Any], bindings: tuple[str, ...] = _BINDINGS) -> list[Hook]:
    """A hook with `wrapper` on each helper each module of `bindings` binds."""
    hooks = []
    for module_name in bindings:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        hooks += [Hook(module_name, name, wrapper, f"where a client connecting through `{module_name}.{name}` "
                       "connects (server.address, server.port, network.transport)")
                  for name in _HELPERS if hasattr(module, name)]
    return hooks


def remembered(wrapped: Any, args: tuple[Any, ...], kwargs: dict[str, Any], transport_local: Local | None) -> Any:
    """What a hooked helper returns: its context manager, remembering the streams it yields (`transport_local`:
    where the line's streamable HTTP helper holds its transport, if it does)."""
    context_manager = wrapped(*args, **kwargs)
    if isinstance(context_manager, Remembered):  # a binding of a helper hooked where mcp defines it
        return context_manager
    with contained("reading a transport's destination"):
        return Remembered(context_manager, destination(wrapped.__name__, args, kwargs), transport_local)
    return context_manager


def destination(helper: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    if helper == "stdio_client":
        return {NETWORK_TRANSPORT: NETWORK_TRANSPORT_PIPE}
    url = args[0] if args else kwargs.get("url")
    if not isinstance(url, str):
        return {NETWORK_TRANSPORT: NETWORK_TRANSPORT_TCP}
    parts = urlsplit(url)
    attributes: dict[str, Any] = {NETWORK_TRANSPORT: NETWORK_TRANSPORT_TCP}
    if parts.hostname:
        attributes[SERVER_ADDRESS] = parts.hostname
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    if port is not None:
        attributes[SERVER_PORT] = port
    return attributes


def _entry(write_stream: object) -> tuple[Any, dict[str, Any], Callable[[], object] | None] | None:
    """What is remembered of this write stream's transport, if a wrapped helper yielded it and it is open."""
    entry = _open.get(id(write_stream))  # one read: atomic, no lock needed
    return entry if entry is not None and entry[0] is write_stream else None


def of_stream(write_stream: object) -> dict[str, Any]:
    """The destination of the transport that yielded this write stream, if a wrapped helper did."""
    entry = _entry(write_stream)
    return entry[1] if entry is not None else {}


class Remembered:
    """The helper's async context manager, remembering the streams it yields while they are open, and how
    to read the session id its transport was given (streamable HTTP)."""

    def __init__(self, context_manager: Any, attributes: dict[str, Any], transport_local: Local | None) -> None:
        self._context_manager = context_manager
        self._attributes = attributes
        self._transport_local = transport_local
        self._key: int | None = None

    async def __aenter__(self) -> Any:
        streams = await self._context_manager.__aenter__()
        write_stream, session_id = streams[1], None
        with contained("finding a transport's session id"):
            session_id = _session_id_getter(self._context_manager, streams, self._transport_local)
        with _lock:
            self._key = id(write_stream)
            _open[self._key] = (write_stream, self._attributes, session_id)
        return streams

    async def __aexit__(self, *exc_info: Any) -> Any:
        with _lock:
            _open.pop(self._key, None)
        return await self._context_manager.__aexit__(*exc_info)


def _session_id_getter(
    context_manager: Any, streams: Any, transport_local: Local | None
) -> Callable[[], object] | None:
    """mcp 1.x's streamable HTTP helper yields a getter; 2.x's keeps the session id on its transport, a local
    of the helper (`transport_local`), suspended at its `yield` while the streams are open."""
    if len(streams) > 2 and callable(streams[2]):
        return streams[2]
    if transport_local is None:
        return None
    transport = transport_local.in_context_manager(context_manager)
    if transport is not None and hasattr(transport, "session_id"):
        return lambda: transport.session_id
    return None


def session_id_of(write_stream: object) -> str | None:
    """The session id the transport behind this write stream holds now, if it has one."""
    entry = _entry(write_stream)
    if entry is None or entry[2] is None:
        return None
    session_id = entry[2]()
    return session_id if isinstance(session_id, str) else None


def open_count() -> int:
    with _lock:
        return len(_open)
