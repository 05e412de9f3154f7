"""The 2026-07-28 multi-round-trip flow: a tools/call answered `input_required` is completed by a new request
that brings its caller's input. That request's span links to the interim one. The interim answer is known by
the opaque `requestState` it carries, which the request completing it echoes; an answer with no state (a server
that keeps none) by what the protocol carries instead: the retry repeats the call (its tool and arguments) and
answers the input requests by their keys. Each side remembers its last MAX_REMEMBERED interim answers for
ROUND_TRIP_SECONDS, by a digest (a sealed state can be large; arguments are never kept); each is taken once.
Identical stateless calls in flight at once may link to one another's interim answers: they are alike.
"""

from __future__ import annotations

import hashlib
from typing import Any

from opentelemetry.trace import SpanContext

from otel_mcp_cancel.memory import Memory
from otel_mcp_cancel.messages import message_field, tool_arguments

MAX_REMEMBERED = 1024
ROUND_TRIP_SECONDS = 600.0  # a person answering an elicitation takes minutes, not hours


class InterimAnswers:
    def __init__(self) -> None:
        # By the process, not the session: a caller may complete the round trip on another connection.
        self.by_state: Memory[SpanContext] = Memory(MAX_REMEMBERED, MAX_REMEMBERED, ROUND_TRIP_SECONDS)

    def remember(self, tool: str | None, params: Any, result: Any, interim: SpanContext) -> None:
        """The interim answer `result` to a call of `tool` with `params` ended the span `interim`."""
        state = message_field(result, "requestState")
        key = _digest(state) if isinstance(state, str) else _round(tool, message_field(result, "inputRequests"),
                                                                    params)
        if key is not None:
            self.by_state.put(None, key, interim)

    def completed(self, tool: str | None, params: Any) -> SpanContext | None:
        """The interim answer's span a call of `tool` with `params` completes, within ROUND_TRIP_SECONDS; taken."""
        if params is None:
            return None
        state = message_field(params, "requestState")
        key = _digest(state) if isinstance(state, str) else _round(tool, message_field(params, "inputResponses"),
                                                                    params)
        return self.by_state.take(None, key) if key is not None else None


def _digest(state: str) -> bytes:
    return hashlib.sha256(state.encode("utf-8", "surrogatepass")).digest()


def _round(tool: str | None, keyed: Any, params: Any) -> bytes | None:
    """A stateless round trip's digest: the call's tool and arguments, and the keys of its input requests (or of
    the responses to them)."""
    keys = getattr(keyed, "keys", None)
    if keys is None or not keyed:
        return None
    return _digest(repr((tool, sorted(map(str, keys())), tool_arguments(params))))
