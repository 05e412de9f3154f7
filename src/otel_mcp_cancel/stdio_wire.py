"""Over stdio an answer reaches its caller when its line is written and flushed to the process's stdout.

The SDK hands each message to a writer task of its stdio transport, and a request's handling ends as soon as
the writer has taken its answer. The write can still fail after that: the caller closed its end of the pipe
(BrokenPipeError), and the answer never reached it. So a request served over stdio whose answer was handed
over is concluded when the writer has flushed that answer's line (what the answer says, as anywhere) or
failed to (its caller is gone: cancelled, and a ghost if its handler had finished). The writer's messages
are told apart by the request id at the head of the line, as both SDK lines write it.
"""

from __future__ import annotations

import json
import weakref
from collections import OrderedDict
from collections.abc import Callable

from otel_mcp_cancel.request_state import LIVE, RequestRecord

# Both SDK lines write an answer as `{"jsonrpc":"2.0","id":<id>,"result"|"error":...}`.
_ANSWER_HEAD = '{"jsonrpc":"2.0","id":'
_MESSAGE_HEAD = '{"jsonrpc"'
_ANSWER_BODIES = (',"result"', ',"error"')
_ID_DECODER = json.JSONDecoder()
NOT_AN_ANSWER = object()  # a request, a notification, a line not in that form (an id may be null)

# Ids whose line was flushed before their request asked to be held (the writer ran ahead of the handler's
# task): asked for once, soon after. Bounded: an answer no record asks for (a request not traced) is forgotten.
_WRITTEN_REMEMBERED = 64

Conclude = Callable[[RequestRecord], None]


def answered_id(line: object) -> object:
    """The request id an answer line answers, or NOT_AN_ANSWER."""
    if type(line) is not str or not line.startswith(_ANSWER_HEAD):
        return NOT_AN_ANSWER
    try:
        request_id, end = _ID_DECODER.raw_decode(line, len(_ANSWER_HEAD))
    except ValueError:
        return NOT_AN_ANSWER
    if not line.startswith(_ANSWER_BODIES, end) or type(request_id) not in (int, str):
        return NOT_AN_ANSWER
    return request_id


class StdioWire:
    """One stdio transport's stdout, as its writer task writes to it: which answers it flushed, and whether
    a write failed. Used on the transport's event loop only."""

    def __init__(self) -> None:
        self._held: dict[object, tuple[RequestRecord, Conclude]] = {}
        self._written: OrderedDict[object, None] = OrderedDict()
        self._file: object = None  # the file the writer writes to, learned from its first message
        self._writing: object = NOT_AN_ANSWER  # the id of the answer whose line is being written
        self.broken = False
        _WIRES.add(self)

    def holds(self, record: RequestRecord, conclude: Conclude) -> bool:
        """Whether the record waits for its answer's line (the wire then concludes it with `conclude`); False:
        conclude it now. A failed write was noted on it."""
        answer = record.answer
        if answer is None or answer.task_status is not None or record.caller_gone:
            return False  # nothing to deliver, or a task's own telemetry follows it
        request_id = record.request_id
        if self._written.pop(request_id, NOT_AN_ANSWER) is None:
            return False  # already flushed
        if self.broken:
            record.note_undelivered()
            return False
        earlier = self._held.pop(request_id, None)
        if earlier is not None:  # a peer reused an id: the earlier answer was handed over first
            earlier[1](earlier[0])
        self._held[request_id] = (record, conclude)
        return True

    def writing(self, file: object, line: object) -> bool:
        """The writer is writing `line` to `file`: whether it is the transport's message (followed to its flush)."""
        if type(line) is not str or not line.startswith(_MESSAGE_HEAD):
            return False
        self._file = file
        self._writing = answered_id(line)
        return True

    def flushing(self, file: object) -> bool:
        return file is self._file and self._file is not None

    def flushed(self) -> None:
        """The line being written reached the pipe."""
        request_id, self._writing = self._writing, NOT_AN_ANSWER
        if request_id is NOT_AN_ANSWER:
            return
        held = self._held.pop(request_id, None)
        if held is not None:
            held[1](held[0])
            return
        self._written[request_id] = None
        if len(self._written) > _WRITTEN_REMEMBERED:
            self._written.popitem(last=False)

    def broke(self) -> None:
        """A write failed: the caller closed its end. Nothing written from now on reaches it, nor did the line
        being written; every request of this transport still in flight lost its caller."""
        self.broken = True
        LIVE.caller_gone_of(lambda record: record.wire is self)
        self._conclude_held(undelivered=True)

    def release(self) -> None:
        """No more lines will be written (the process ends, or uninstrument() ran): what waits concludes on
        what its answer said."""
        self._conclude_held(undelivered=False)

    def _conclude_held(self, *, undelivered: bool) -> None:
        held, self._held = self._held, {}
        for record, conclude in held.values():
            if undelivered:
                record.note_undelivered()
            conclude(record)


_WIRES: weakref.WeakSet[StdioWire] = weakref.WeakSet()


def release_all() -> None:
    for wire in list(_WIRES):
        wire.release()
