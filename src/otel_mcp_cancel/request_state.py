"""Per-request bookkeeping: what the hooks observed about one inbound request while it is in flight.

A record is opened by the outermost hook that sees the request (the layer that
writes its answer), found by inner hooks through a context variable, and found
by the cancel-notification hook through the key the SDK uses for the request.
It is dropped when the request settles, so the live count returns to zero.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from opentelemetry.trace import Span

from otel_mcp_cancel.answers import Answer, AnswerKind, HandlerEnd
from otel_mcp_cancel.attributes import metric_attributes
from otel_mcp_cancel.conventions import OTHER
from otel_mcp_cancel.peers import Peer
from otel_mcp_cancel.session_telemetry import SessionRecord


class AnswerWire(Protocol):
    """Where a request's answer is written, when the request is concluded only once it is (`stdio_wire`)."""

    def holds(self, record: RequestRecord, conclude: Callable[[RequestRecord], None]) -> bool: ...


class RequestRecord:
    """A plain class, not a dataclass: one is made for every request, and its constructor sets only what a
    request starts with; every other field is the class's default until a hook sets it on the record."""

    method: str
    params: Any
    request_id: object
    network_transport: str | None
    span: Span
    method_known: bool = True  # in the protocol's method list, served by this server, or sent by our own side
    method_named_late: bool = False  # not known as it started: its method's attributes are set as it ends
    target: str | None = None  # the tool or prompt it names, cut to size
    name: str = ""  # its span's name as started
    target_named: bool = False  # that name names its target
    started: float  # perf_counter() as it was made
    ends_span: bool = True  # else whoever opened its span ends it (see `serving.WaitingSpan`)
    handler_claimed: bool = False  # an inner hook is reporting how the handler ended
    handler: HandlerEnd | None = None
    answer: Answer | None = None
    result: Any = None  # the answer's result as the hook saw it; recorded only if content capture is on
    cancelled: bool = False
    caller_gone: bool = False  # its caller's stream ended before any answer was written: none written later reaches it
    left_uncancelled: bool = False  # and it had not cancelled first: its leaving, not a cancel, suppressed the answer
    # Concluded as its caller left, while its handler ran on (a stdio server about to be stopped): its handler's
    # end, if it comes, is reported after (`ServerTelemetry.handler_ended_late`).
    concluded_early: bool = False
    concluding: bool = False  # its serving task is concluding it (a stdio request's: claimed under EARLY_CLAIMS)
    cancel_reason: str | None = None
    cancel_time_ns: int | None = None
    answer_writing: bool = False  # its answer's write began (mcp 1.x: the write's failure ends its handling)
    # mcp 1.x: a cancellation cut the answer's write short (a peer's cancel with the guard off, or the session's end
    # as its caller hung up)
    write_interrupted: bool = False
    request_id_late: bool = False  # its id was learned after its span started: the id goes on as it ends
    protocol_version: str | None = None
    http_version: str | None = None  # the HTTP version it came over, if it did
    in_session: SessionRecord | None = None  # the session it was served (server) or sent (client) in
    peer: Peer | None = None  # the peer that sent (server) or answered (client) it, as it named itself
    wire: AnswerWire | None = None  # served over stdio: the stdout its answer is written to
    server: Any = None  # the low-level server answering, to ask which tools it registered
    session: Any = None  # the connection or session it came on, to match retries
    tool_registered: bool = False
    exception: BaseException | None = None  # what a framework's tool raised (it answers isError instead)
    registered_annotations: Any = None  # the framework's own annotations object, read when a ghost needs its risk
    task_id: str | None = None  # the task it created (a tools/call) or names (tasks/*), cut to size
    task_ttl: float | None = None  # seconds the task it created keeps its result, if its answer says
    # A server's tools/call: its caller's cancel crossed its answer on the wire (`crossing`), read before it was
    # concluded; and what is left of it, once answered, for a cancel read after.
    crossed: bool = False
    answered_call: Any = None
    # Told of its answer as it is written, before the request is concluded (a `tasks/*` request's task
    # learns its caller was told, ahead of whatever that caller sends next).
    on_result: Callable[[RequestRecord], None] | None = None

    def __init__(
        self,
        method: str,
        params: Any,
        request_id: object,
        network_transport: str | None,
        span: Span,
        method_known: bool = True,
        target: str | None = None,
        name: str = "",
    ) -> None:
        self.method = method
        self.params = params
        self.request_id = request_id
        self.network_transport = network_transport
        self.span = span
        self.method_known = method_known
        self.target = target
        self.name = name
        self.started = time.perf_counter()

    def metric_attributes(self, outcome: tuple[tuple[str, Any], ...] = ()) -> dict[str, Any]:
        """Its metrics' shared attributes (and a verdict's `outcome`): a method, tool or prompt name the server
        does not serve is _OTHER, so random names cannot grow the series count. Shared: never mutate it."""
        target = self.target
        return metric_attributes(
            self.method if self.method_known else OTHER,
            target if self.tool_registered or target is None else OTHER,
            self.protocol_version,
            self.network_transport,
            self.http_version,
            self.peer.metric_attribute if self.peer is not None else None,
            outcome,
        )

    def note_handler(self, end: HandlerEnd) -> None:
        if self.handler is None:
            self.handler = end

    def note_exception(self, error: BaseException) -> None:
        # The first one: raised nearest the user's code.
        if self.exception is None:
            self.exception = error

    def note_answer(self, answer: Answer) -> None:
        # Only the first answer counts: it is the one the peer can have seen.
        if self.answer is None and not self.caller_gone:
            self.answer = answer

    def note_caller_gone(self, reason: str | None = None) -> None:
        """The caller hung up (a server's peer whose stream ended; a client's own code closing its session)
        with no answer yet: it gave up, as with a cancel (`reason`: a client's own, bounded), and an answer
        after that reaches nobody, or (a client's) is only the closing connection's error."""
        if self.answer is None:
            self.caller_gone = True
            self.left_uncancelled = self.left_uncancelled or not self.cancelled
            self.note_cancel(reason)

    def note_undelivered(self) -> None:
        """The answer's write failed because the caller's stream had closed: nothing reached it."""
        self.answer = None
        self.note_caller_gone()

    def note_unwritten(self, cancelled: bool) -> None:
        """No answer reached the wire (or none while its caller was there): `cancelled`, its caller had cancelled
        by leaving (the 2026-07-28 revision's cancel over HTTP), else it went unanswered."""
        self.answer = None
        if cancelled:
            self.note_cancel(None)

    def note_cancel(self, reason: str | None, at_ns: int | None = None) -> None:
        # A duplicate cancel keeps the first one's reason and time.
        if not self.cancelled:
            self.cancelled = True
            self.cancel_reason = reason
            self.cancel_time_ns = at_ns if at_ns is not None else time.time_ns()


# Claims a stdio request's conclusion between its serving task and a hang-up seen while the event loop was blocked
# (`hang_up_watch`): whichever comes first concludes it.
EARLY_CLAIMS = threading.Lock()


# The request being served (or sent) in this task, held by a weak reference: a context copied while it ran (a
# worker thread's, a task spawned under it) may outlive it, and must not keep the record, and through it its
# session, alive. Read as `current_record.get()()`: two calls made in C, on every request.
CurrentRecord = contextvars.ContextVar["weakref.ref[RequestRecord]"]
NO_RECORD: weakref.ref[RequestRecord] = weakref.ref(RequestRecord.__new__(RequestRecord))  # dead at once: None

# The inbound request being served, and the outbound request being sent, in this task. Two: a server's handler
# may itself send a request.
current_record: CurrentRecord = contextvars.ContextVar("otel_mcp_cancel_current_record", default=NO_RECORD)
current_client_record: CurrentRecord = contextvars.ContextVar("otel_mcp_cancel_current_client_record",
                                                              default=NO_RECORD)


class LiveRequests:
    """Records in flight, keyed by the SDK object a cancel notification leads to (the dispatch context).

    A cancel can arrive after the SDK queued a request but before its task
    started; its reason waits in `_early` until the record opens, and leaves
    with the key object if the task never starts.

    A request's record is added, found, cancelled and discarded by the one event loop serving its session, and
    each of those is one dict operation (atomic): only what reads or writes more than one entry at a time
    (keeping an early cancel, which its key's collection may drop from any thread; a scan) takes the lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[int, RequestRecord] = {}
        self._early: dict[int, tuple[weakref.ref[Any], str | None, int]] = {}

    def add(self, key: object, record: RequestRecord) -> None:
        self._records[id(key)] = record
        early = self._early.pop(id(key), None) if self._early else None
        if early is not None and early[0]() is key:
            record.note_cancel(early[1], early[2])

    def find(self, key: object) -> RequestRecord | None:
        return self._records.get(id(key))

    def note_cancel(self, key: object, reason: str | None) -> RequestRecord | None:
        """Note a cancel on the request's record, or keep it until the record opens. Returns the record."""
        now = time.time_ns()
        with self._lock:
            record = self._records.get(id(key))
            if record is None:
                if id(key) not in self._early:
                    drop = functools.partial(self._drop_early, id(key))
                    self._early[id(key)] = (weakref.ref(key, drop), reason, now)
                return None
        record.note_cancel(reason, now)
        return record

    def callers_gone(self, session: object) -> list[RequestRecord]:
        """The stream of `session` (a request's `session`) ended: its requests still in flight lost their caller.
        Returns those its caller was told nothing of but `cancelled` (see `caller_gone_of`)."""
        return self.caller_gone_of(lambda record: record.session is session)

    def caller_gone_of(self, matches: Callable[[RequestRecord], bool]) -> list[RequestRecord]:
        """The caller of each request in flight that `matches` hung up. Returns those its caller was told nothing
        of but `cancelled`: no answer yet, or (mcp 1.x) only a cancel's acknowledgement, its handler running on."""
        in_flight = list(self._records.values())  # one copy, made in C: another loop may add or discard meanwhile
        gone = []
        for record in in_flight:
            if matches(record):
                record.note_caller_gone()
                answer = record.answer
                if record.caller_gone or (answer is not None and answer.kind is AnswerKind.CANCEL_ACK):
                    gone.append(record)
        return gone

    def _drop_early(self, key_id: int, _ref: object) -> None:
        with self._lock:
            self._early.pop(key_id, None)

    def discard(self, key: object, record: RequestRecord) -> None:
        if self._records.get(id(key)) is record:
            del self._records[id(key)]

    def __len__(self) -> int:
        """Requests and early cancels still held: zero once traffic has settled."""
        with self._lock:
            return len(self._records) + len(self._early)


LIVE = LiveRequests()
