"""Sessions: `mcp.server.session.duration` and `mcp.client.session.duration`, once per session however it ends,
with `error.type` when an error ended it.

A session is a connection that began with the `initialize` handshake and lasts until its stream closes (stdio,
SSE, a streamable HTTP session, memory streams). Stateless HTTP and every connection on the 2026-07-28
revision (which has no sessions: `server/discover`, no handshake) have none, on either end. On the server, the
hook around a session's serving loop opens a record here; the requests served in it tell it what only they
see: the negotiated protocol version, and whether they came over HTTP. On the client, a session is a
`ClientSession` from entering to leaving it; its requests learn the negotiated version from it once
`initialize` (or discovery) has answered.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.metrics import Histogram

from otel_mcp_cancel.answers import exception_type
from otel_mcp_cancel.attributes import bounded
from otel_mcp_cancel.conventions import (
    ERROR_TYPE,
    MCP_PROTOCOL_VERSION,
    NETWORK_PROTOCOL_HTTP,
    NETWORK_PROTOCOL_NAME,
    NETWORK_TRANSPORT,
    NETWORK_TRANSPORT_TCP,
    SERVER_ADDRESS,
    SERVER_PORT,
)
from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.peers import Peer


@dataclass(eq=False)
class SessionRecord:
    started: float = field(default_factory=time.perf_counter)
    protocol_version: str | None = None
    over_http: bool = False  # it runs over HTTP (a server learns it from its requests)
    over_stdio: bool = False  # a server's, over its process's stdin and stdout: its caller's end is the process's
    server: dict[str, Any] = field(default_factory=dict)  # a client's: the server's address and port
    measured: bool = False  # its duration point is recorded (a stdio server's, as its caller hung up)
    peer: Peer | None = None  # its peer, as it named itself in `initialize`
    http_session_id: str | None = None  # a streamable HTTP session's `Mcp-Session-Id`, as its requests carry it
    caller_left: bool = False  # a server's: its caller's stream ended; a handler begun after that serves no one
    read_to_end: bool = False  # a server's: it read its caller's stream to the end (a cancel sent before is read)
    # A server's calls (their records, which know this module, not it them) whose handlers ended after its caller
    # left, before it read its stream to the end: their ghosts, reported once it has (a cancel may be unread).
    late_ghosts: list[Any] = field(default_factory=list)

    def take_late_ghosts(self) -> list[Any]:
        ghosts, self.late_ghosts = self.late_ghosts, []
        return ghosts


class LiveSessions:
    """Sessions open now: back to zero when they have all ended (the tests' leak check)."""

    def __init__(self) -> None:
        self._open: set[SessionRecord] = set()
        self._lock = threading.Lock()

    def add(self, record: SessionRecord) -> None:
        with self._lock:
            self._open.add(record)

    def discard(self, record: SessionRecord) -> None:
        with self._lock:
            self._open.discard(record)

    def __len__(self) -> int:
        return len(self._open)


LIVE_SESSIONS = LiveSessions()


def error_type(error: BaseException) -> str:
    """What ended a session: the exception's class; for a task group's exception group (nested or not), the
    class of the first exception inside it that is not a cancellation its siblings caused."""
    leaves = list(_leaves(error))
    causes = [leaf for leaf in leaves if not isinstance(leaf, asyncio.CancelledError)] or leaves
    return exception_type(causes[0])


def _leaves(error: BaseException) -> Iterator[BaseException]:
    inner = getattr(error, "exceptions", None)
    if isinstance(inner, tuple) and inner:
        for exception in inner:
            yield from _leaves(exception)
    else:
        yield error


# The first protocol revision without sessions: it drops the initialize handshake and Mcp-Session-Id.
SESSIONLESS_SINCE = "2026-07-28"


def has_sessions(protocol_version: str | None) -> bool:
    """Whether a connection speaking this revision has a session to measure (revisions are dates, so they
    compare as strings). One whose version is unknown (it ended before its handshake) is measured."""
    return protocol_version is None or protocol_version < SESSIONLESS_SINCE


def note_destination(record: SessionRecord, destination: dict[str, Any]) -> None:
    """Where a client session goes: the server's address and port, and whether it is HTTP (the convention's
    session attributes have no network.transport)."""
    record.server = {key: value for key, value in destination.items() if key in (SERVER_ADDRESS, SERVER_PORT)}
    record.over_http = destination.get(NETWORK_TRANSPORT) == NETWORK_TRANSPORT_TCP  # streamable HTTP or SSE


def session_attributes(record: SessionRecord, error: BaseException | None) -> dict[str, Any]:
    """The session-duration metrics' attributes, as the convention lists them."""
    attributes: dict[str, Any] = dict(record.server)
    if record.protocol_version is not None:
        attributes[MCP_PROTOCOL_VERSION] = bounded(record.protocol_version)
    if record.over_http:
        attributes[NETWORK_PROTOCOL_NAME] = NETWORK_PROTOCOL_HTTP
    if record.peer is not None:
        attributes[record.peer.metric_attribute[0]] = record.peer.metric_attribute[1]
    if error is not None:
        attributes[ERROR_TYPE] = error_type(error)
    return attributes


class SessionTelemetry:
    """One side's sessions: `mcp.server.session.duration` or `mcp.client.session.duration`."""

    def __init__(self, duration: Histogram, on_close: Callable[[SessionRecord], None] | None = None) -> None:
        self._duration = duration
        self._on_close = on_close  # told of each session that ends, after it is measured
        # A request finds its session by the stream it was read from (mcp 2.x runs handlers in the sender's
        # context, not the serving loop's). By the stream's id: streams are not weak-referenceable, and a
        # session's entry leaves when it ends, so a live entry's id is always its own stream's.
        self._by_stream: dict[int, SessionRecord] = {}

    def of(self, read_stream: Any) -> SessionRecord | None:
        """The session served from this stream, if one is."""
        return self._by_stream.get(id(read_stream))

    def open(self) -> SessionRecord | None:
        if not is_instrumentation_enabled():
            return None
        record = SessionRecord()
        LIVE_SESSIONS.add(record)
        return record

    def close(self, record: SessionRecord, error: BaseException | None) -> None:
        """Measured once, if it was a session; an `Exception` that ended it is its `error.type` (a cancel, a
        shutdown, is a normal end)."""
        LIVE_SESSIONS.discard(record)
        self.measure(record, error if isinstance(error, Exception) else None)
        if self._on_close is not None:
            with contained("ending a session's tasks"):
                self._on_close(record)

    def measure(self, record: SessionRecord, error: Exception | None = None) -> None:
        """Its duration point, once: as it ends, or earlier, as a stdio server's caller hangs up (its host kills
        such a server soon after; the session ended then, as it would have if the server had exited by itself)."""
        if record.measured:
            return
        record.measured = True
        with contained("measuring a session"):
            if has_sessions(record.protocol_version):
                self._duration.record(time.perf_counter() - record.started, session_attributes(record, error))

    @contextmanager
    def session(self, read_stream: Any, over_stdio: bool = False) -> Iterator[None]:
        """Around a session's serving loop, reading from `read_stream`."""
        record = self.open()
        if record is None:
            yield
            return
        record.over_stdio = over_stdio
        self._by_stream[id(read_stream)] = record
        error: BaseException | None = None
        try:
            yield
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._by_stream.pop(id(read_stream), None)
            self.close(record, error)


def note_request(record: SessionRecord | None, protocol_version: str | None, http_version: str | None) -> None:
    """A request served in a session says what it knows of the session."""
    if record is None:
        return
    if protocol_version is not None:
        record.protocol_version = protocol_version
    if http_version is not None:
        record.over_http = True
