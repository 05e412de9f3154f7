"""The features that remember something across requests, or add to a concluded request what only they know: each
an observer the conclusion (`request_telemetry.RequestTelemetry.conclude`) calls once per request, after the
verdict is described and before the user's hook, in the order its side lists them. An observer keeps whatever it
remembers in its own bounded memory (`memory.Memory`); a new feature is one observer and one hook.

An observer is `(activity, call)`: `call(record, verdict)`, and the activity a contained fault names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from otel_mcp_cancel.conventions import (
    EVENT_RESPONSE_WRITE_INTERRUPTED,
    GHOST_KIND_CALLER_GONE,
    GHOST_KIND_SUPPRESSED,
    OUTCOME_CANCELLED,
    TOOL_CANCEL_REASON,
    TOOL_RETRIED_CANCEL_REASON,
    TOOLS_CALL,
)
from otel_mcp_cancel.crossing import Crossings
from otel_mcp_cancel.ghost_reporting import GhostEmitter
from otel_mcp_cancel.messages import tool_arguments
from otel_mcp_cancel.outcome import Verdict
from otel_mcp_cancel.request_state import RequestRecord
from otel_mcp_cancel.retries import RecentCalls
from otel_mcp_cancel.round_trips import InterimAnswers
from otel_mcp_cancel.session_telemetry import note_request
from otel_mcp_cancel.task_requests import TaskRequests

Observer = tuple[str, Callable[[RequestRecord, Verdict], None]]


def suppressed_kind(record: RequestRecord) -> tuple[str, str]:
    """A cancelled call's ghost: its kind, and why its answer reached nobody, as its WARNING says. The first cause
    names it: a caller that cancelled and then hung up was told `cancelled` before it left."""
    if record.left_uncancelled:
        return GHOST_KIND_CALLER_GONE, "its caller was gone (hung up, or closed its end of the pipe)"
    return GHOST_KIND_SUPPRESSED, "the caller cancelled"


def session_requests(record: RequestRecord, verdict: Verdict) -> None:
    """A server's session learns the protocol version and transport its requests came with."""
    note_request(record.in_session, record.protocol_version, record.http_version)


def server_retries(ghosts: GhostEmitter) -> Observer:
    """A call that repeats a ghost of its session links to it; with the replicas' key, every call is
    fingerprinted."""
    def observe(record: RequestRecord, verdict: Verdict) -> None:
        retries = ghosts.retries
        if retries is not None and retries.held:  # most requests: no ghost is remembered
            ghosts.match_retry(record)  # before this call's own ghost, if any, is remembered: it retries no other
        if ghosts.fingerprints is not None:
            ghosts.fingerprint(record, record.span)
    return "matching a retry", observe


def suppressed_ghosts(ghosts: GhostEmitter) -> Observer:
    """A cancelled call whose handler ran to its end: a ghost on the call's own span."""
    def observe(record: RequestRecord, verdict: Verdict) -> None:
        handler_outcome = verdict.ghost_handler_outcome
        if handler_outcome is not None:
            kind, why = suppressed_kind(record)
            ghosts.emit(ghosts.subject(record), handler_outcome, kind, why, on=record.span, scope=record.session)
        if record.write_interrupted:
            record.span.add_event(EVENT_RESPONSE_WRITE_INTERRUPTED)
    return "reporting a ghost", observe


def crossed_answers(crossings: Crossings, ghosts: GhostEmitter,
                    report: Callable[[Any, str, object], None]) -> Observer:
    """An answered tools/call: a cancel that crossed it is reported now, or what a later one needs is left."""
    def observe(record: RequestRecord, verdict: Verdict) -> None:
        if record.method == TOOLS_CALL and (record.crossed or record.answered_call is not None):
            crossings.concluded(record, ghosts.subject, report)
    return "following a crossed answer", observe


def server_tasks(tasks: TaskRequests) -> Observer:
    def observe(record: RequestRecord, verdict: Verdict) -> None:
        if record.task_id is not None:  # most requests name no task
            tasks.observe(record, verdict)
    return "following a task", observe


def client_tasks(tasks: TaskRequests) -> Observer:
    def observe(record: RequestRecord, verdict: Verdict) -> None:
        if record.task_id is not None:  # most requests name no task
            tasks.observe(record, verdict)  # the client's view: what it was told of the task
            tasks.waited(record, verdict)
    return "following a task", observe


def cancel_reasons(record: RequestRecord, verdict: Verdict) -> None:
    """A client's reason for giving up is bounded (timeout | caller): an attribute too, so "our own timeouts" is a
    query."""
    if verdict.outcome == OUTCOME_CANCELLED and record.cancel_reason is not None:
        record.span.set_attribute(TOOL_CANCEL_REASON, record.cancel_reason)


def client_retries(given_up: RecentCalls, scope: object) -> Observer:
    """A call that repeats one this client gave up on, in any of its sessions (on another replica, the server
    cannot tell): its span links to that call's and says why it was given up on, so tail sampling keeps it and
    the server's span in its trace. A call given up on is remembered, for its own retries."""
    def observe(record: RequestRecord, verdict: Verdict) -> None:
        given_up_now = verdict.outcome == OUTCOME_CANCELLED and record.cancel_reason is not None
        if record.method != TOOLS_CALL or record.target is None or not (given_up_now or given_up.held):
            return
        key = given_up.key_of(record.target, tool_arguments(record.params))
        repeated = given_up.find(scope, key)
        if repeated is not None:
            record.span.add_link(repeated.span_context)
            record.span.set_attribute(TOOL_RETRIED_CANCEL_REASON, repeated.label)
        if given_up_now and record.cancel_reason is not None:
            given_up.remember(scope, key, record.span.get_span_context(), record.cancel_reason)
    return "matching a retry", observe


def round_trips(interim: InterimAnswers) -> Observer:
    """The 2026-07-28 multi-round-trip flow: a tools/call that brings the input an interim answer asked for links
    to that answer's span; an interim answer is remembered for the request that will complete it."""
    def observe(record: RequestRecord, verdict: Verdict) -> None:
        if record.method != TOOLS_CALL:
            return
        if interim.by_state.held:  # an attribute: most calls complete no round trip, and none is remembered
            completed = interim.completed(record.target, record.params)
            if completed is not None:
                record.span.add_link(completed)
        if verdict.result_type is not None:
            interim.remember(record.target, record.params, record.result, record.span.get_span_context())
    return "following a request's round trip", observe
