"""What the sending side's hooks of both SDK lines share: where a session's stream leads, its requests' spans, how
long the session lasted, and a streamable HTTP transport that failed under its calls."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from otel_mcp_cancel.answers import Answer
from otel_mcp_cancel.attributes import bounded
from otel_mcp_cancel.conventions import CANCEL_REASON_CALLER, MCP_SESSION_ID, NETWORK_TRANSPORT
from otel_mcp_cancel.faults import contained, fault
from otel_mcp_cancel.hooks import client_transports
from otel_mcp_cancel.hooks.capabilities import CLIENT_SESSIONS, TRANSPORT_FAILURES
from otel_mcp_cancel.hooks.observations import HookSet, arg, connection_lost
from otel_mcp_cancel.hooks.wrapping import Hook
from otel_mcp_cancel.request_state import RequestRecord
from otel_mcp_cancel.session_telemetry import SessionRecord, note_destination


@dataclass(eq=False)
class ClientSessionEntry:
    """A client session, as its requests find it by the stream they are sent on."""

    record: SessionRecord
    client: weakref.ref[Any]  # the ClientSession
    destination: dict[str, Any]  # where its transport leads (`client_transports.of_stream`), as it began
    in_flight: weakref.WeakSet[RequestRecord] = field(default_factory=weakref.WeakSet)  # its requests' records


class ClientHooks(HookSet):
    """What the sending side's hooks of both lines share: where a session's stream leads, its span, and how
    long the session lasted (from entering the `ClientSession` to leaving it)."""

    def __init__(self, telemetry: Any) -> None:
        super().__init__(telemetry)
        self._sessions: weakref.WeakKeyDictionary[Any, SessionRecord] = weakref.WeakKeyDictionary()
        # A request finds its session by the stream it is sent on (by id: streams are not weak-referenceable; an
        # entry leaves as its session ends). In process there is no stream, and no entry.
        self._by_stream: dict[int, ClientSessionEntry] = {}
        # Each streamable HTTP transport's session stream (the one its writer reads), to find its requests by.
        self._transports: weakref.WeakKeyDictionary[Any, object] = weakref.WeakKeyDictionary()

    def session_hooks(self, inherited: bool) -> list[Hook]:
        return [
            Hook("mcp.client.session", "ClientSession.__aenter__", self._enter_session, CLIENT_SESSIONS,
                 inherited=inherited),
            Hook("mcp.client.session", "ClientSession.__aexit__", self._leave_session, CLIENT_SESSIONS,
                 ("exc_type", "exc_val", "exc_tb"), inherited=inherited),
        ]

    def session_stream(self, session: Any) -> object:
        """The write stream a client session sends on (it differs between the lines)."""
        raise NotImplementedError

    async def _enter_session(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        entered = await wrapped(*args, **kwargs)  # a session that failed to start never was one
        if self.active:
            with contained("opening a client session"):
                record = self._telemetry.sessions.open()
                if record is not None:
                    stream = self.session_stream(instance)
                    destination = client_transports.of_stream(stream)
                    note_destination(record, destination)
                    self._sessions[instance] = record
                    if stream is not None:
                        self._by_stream[id(stream)] = ClientSessionEntry(record, weakref.ref(instance), destination)
        return entered

    async def _leave_session(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        with contained("leaving a client session"):
            self._telemetry.late_answers.forget(self.session_stream(instance))
            entry = self._by_stream.pop(id(self.session_stream(instance)), None)
            for request in list(entry.in_flight) if entry is not None else ():
                # Its own code closed the session under a call: that caller gave up, whatever error the
                # closing connection then raises into the call.
                request.note_caller_gone(CANCEL_REASON_CALLER)
        try:
            return await wrapped(*args, **kwargs)
        finally:
            with contained("closing a client session"):
                record = self._sessions.pop(instance, None)
                if record is not None:
                    version = getattr(instance, "protocol_version", None)  # mcp 2.x keeps it; 1.x does not
                    if isinstance(version, str):
                        record.protocol_version = bounded(version)
                    self._telemetry.sessions.close(record, arg(args, kwargs, 1, "exc_val"))
            with contained("ending a client session's tasks"):
                exc = arg(args, kwargs, 1, "exc_val")
                self._telemetry.tasks.gave_up(self.session_stream(instance), connection_lost(exc))

    def transport_hooks(self) -> list[Hook]:
        http = "mcp.client.streamable_http"
        return [
            *client_transports.transport_hooks(self._transport),
            # A streamable HTTP transport whose POST raised (an HTTP error status on mcp 1.x, an auth flow on either
            # line) tears its session down: the calls in flight failed, though their callers see a cancel.
            Hook(http, "StreamableHTTPTransport.post_writer", self._post_writer, TRANSPORT_FAILURES,
                 ("client", "write_stream_reader", "read_stream_writer", "write_stream")),
            Hook(http, "StreamableHTTPTransport._handle_post_request", self._post, TRANSPORT_FAILURES, ("ctx",)),
        ]

    async def _post_writer(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """The transport's writer: which session's stream it serves."""
        if self.active:
            with contained("following a client's transport"):
                self._transports[instance] = arg(args, kwargs, 3, "write_stream")
        return await wrapped(*args, **kwargs)

    async def _post(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        try:
            return await wrapped(*args, **kwargs)
        except Exception as exc:
            if self.active:
                with contained("noting a client transport's failure"):
                    entry = self._by_stream.get(id(self._transports.get(instance)))
                    for request in list(entry.in_flight) if entry is not None else ():
                        request.note_answer(Answer.transport_failed(exc))
            raise

    def _transport(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if not self.active:
            return wrapped(*args, **kwargs)
        return client_transports.remembered(wrapped, args, kwargs, self.sdk.http_client_transport)

    def open(
        self, method: str, params: Any, request_id: object, write_stream: object, *, checked: bool = False
    ) -> RequestRecord | None:
        """Start the CLIENT span of a request sent on `write_stream`, with its destination where known.
        `checked`: the hook asked `traced()` just now."""
        entry = self._by_stream.get(id(write_stream)) if write_stream is not None else None
        destination = entry.destination if entry is not None else client_transports.of_stream(write_stream)
        attributes = None
        if destination:  # none over memory streams
            attributes = {key: value for key, value in destination.items() if key != NETWORK_TRANSPORT}
            try:
                session_id = client_transports.session_id_of(write_stream)
                if session_id is not None:  # none before the server assigned one in its `initialize` answer
                    attributes[MCP_SESSION_ID] = bounded(session_id)
            except Exception:
                fault("reading a client's session id")
        transport = destination.get(NETWORK_TRANSPORT)
        record = self._telemetry.open(method, params, request_id, transport, attributes, checked=checked)
        if record is not None:
            record.session = write_stream  # the session it was sent in: its tasks end with it
            if entry is not None:
                session = entry.record
                if session.protocol_version is None:  # known once initialize (or discovery) answered
                    version = getattr(entry.client(), "protocol_version", None)  # mcp 2.x keeps it; 1.x: `resolve`
                    if isinstance(version, str):
                        session.protocol_version = bounded(version)
                record.in_session, record.protocol_version = session, session.protocol_version
                entry.in_flight.add(record)
        return record
