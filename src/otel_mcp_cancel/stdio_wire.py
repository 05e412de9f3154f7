"""Over stdio an answer reaches its caller when its line is written and flushed to the process's stdout.

The SDK hands each message to a writer task of its stdio transport, and a request's handling ends as soon as
the writer has taken its answer. The write can still fail after that: the caller closed its end of the pipe
(BrokenPipeError), and the answer never reached it. So a request served over stdio whose answer was handed
over is concluded when the writer has flushed that answer's line (what the answer says, as anywhere) or
failed to (its caller is gone: cancelled, and a ghost if its handler had finished). The writer's messages
are told apart by the request id at the head of the line, as both SDK lines write it.

Only the transport's own stdout is followed (`follow`: that one file object's write and flush, for as long as
the transport runs), never a class. A request waits for its line only once this transport's lines have been
recognised as answers (a writer that changed its form is never waited for), and never longer than
MAX_HELD_SECONDS, nor behind more than MAX_HELD others: past either bound it is concluded on what its answer
said.
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.request_state import LIVE, RequestRecord
from otel_mcp_cancel.scheduler import SCHEDULER

# Both SDK lines write an answer as `{"jsonrpc":"2.0","id":<id>,"result"|"error":...}`.
_ANSWER_HEAD = '{"jsonrpc":"2.0","id":'
_ANSWER_BODIES = (',"result"', ',"error"')
_ID_DECODER = json.JSONDecoder()
NOT_AN_ANSWER = object()  # a request, a notification, a line not in that form (an id may be null)

# Ids whose line was flushed before their request asked to be held (the writer ran ahead of the handler's
# task): asked for once, soon after. Bounded: an answer no record asks for (a request not traced) is forgotten.
_WRITTEN_REMEMBERED = 64
# How many answers may wait for their lines at once, and for how long after they were handed over: a flush
# follows its write at once, so only a line the wire failed to recognise waits this long.
MAX_HELD = 64
MAX_HELD_SECONDS = 1.0

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
        self._held: OrderedDict[object, tuple[RequestRecord, Conclude, float]] = OrderedDict()
        self._written: OrderedDict[object, None] = OrderedDict()
        self._writing: object = NOT_AN_ANSWER  # the id of the answer whose line is being written
        self.recognised = False  # a line of this transport was read as an answer: answers may wait for theirs
        self.broken = False
        self._expiry_armed = False
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
        if not self.recognised:
            return False
        earlier = self._held.pop(request_id, None)
        if earlier is not None:  # a peer reused an id: the earlier answer was handed over first
            earlier[1](earlier[0])
        self._held[request_id] = (record, conclude, time.monotonic())
        while len(self._held) > MAX_HELD:
            oldest, oldest_conclude, _ = self._held.popitem(last=False)[1]
            oldest_conclude(oldest)
        self._arm_expiry()
        return True

    def writing(self, line: object) -> None:
        """The writer is writing `line`."""
        self._writing = answered_id(line)

    def flushed(self) -> None:
        """The line being written reached the pipe."""
        request_id, self._writing = self._writing, NOT_AN_ANSWER
        if request_id is NOT_AN_ANSWER:
            return
        self.recognised = True
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
        """No more lines will be written (the transport ended, the process ends, or uninstrument() ran): what
        waits concludes on what its answer said."""
        self._conclude_held(undelivered=False)

    def expire(self, now: float) -> None:
        """Conclude, on what its answer said, each answer handed over MAX_HELD_SECONDS or more before `now`."""
        while self._held:
            request_id, (record, conclude, handed_over) = next(iter(self._held.items()))
            if now - handed_over < MAX_HELD_SECONDS:
                return
            del self._held[request_id]
            conclude(record)

    def _arm_expiry(self) -> None:
        """One expiry at a time, run on the transport's event loop (asyncio's; under another loop, the transport's
        end concludes what waits)."""
        if self._expiry_armed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        SCHEDULER.call_later(MAX_HELD_SECONDS, lambda: _on_loop(loop, self._expiry_due),
                             "concluding answers whose lines were not seen")
        self._expiry_armed = True

    def _expiry_due(self) -> None:
        self._expiry_armed = False
        with contained("concluding answers whose lines were not seen"):
            self.expire(time.monotonic())
            if self._held:
                self._arm_expiry()

    def _conclude_held(self, *, undelivered: bool) -> None:
        held, self._held = self._held, OrderedDict()
        for record, conclude, _ in held.values():
            if undelivered:
                record.note_undelivered()
            conclude(record)


_WIRES: weakref.WeakSet[StdioWire] = weakref.WeakSet()


def release_all() -> None:
    for wire in list(_WIRES):
        wire.release()


def follow(stdout: Any, wire: StdioWire) -> Callable[[], None]:
    """Follow what a stdio transport's writer writes to `stdout`, its own file object: that object's `write` and
    `flush` are observed, its class and every other file untouched. Returns what stops following it. A failure
    of either (BrokenPipeError; ValueError once the file is closed) means the caller's end is closed."""
    write, flush = stdout.write, stdout.flush

    async def followed_write(line: Any, *args: Any, **kwargs: Any) -> Any:
        with contained("following an answer to stdout"):
            wire.writing(line)
        try:
            return await write(line, *args, **kwargs)
        except (OSError, ValueError):
            with contained("noting a caller's pipe closed"):
                wire.broke()
            raise

    async def followed_flush(*args: Any, **kwargs: Any) -> Any:
        try:
            result = await flush(*args, **kwargs)
        except (OSError, ValueError):
            with contained("noting a caller's pipe closed"):
                wire.broke()
            raise
        with contained("noting an answer written"):
            wire.flushed()
        return result

    stdout.write, stdout.flush = followed_write, followed_flush

    def stop() -> None:
        own = vars(stdout)
        if own.get("write") is followed_write:
            del stdout.write
        if own.get("flush") is followed_flush:
            del stdout.flush

    return stop


def _on_loop(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    try:
        loop.call_soon_threadsafe(callback)
    except RuntimeError:  # the loop closed: its transport's end concluded what waited
        pass
