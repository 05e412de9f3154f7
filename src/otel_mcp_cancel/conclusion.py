"""The stages every span with an outcome ends by, a request's (server or client) and a task's alike: its verdict
described on it, its duration measured, the span ended. Each is contained on its own: a failing one loses only
itself, never the next."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry.trace import Span, Status, StatusCode

from otel_mcp_cancel.faults import fault
from otel_mcp_cancel.outcome import Verdict

Outcome = tuple[tuple[str, Any], ...]  # a verdict's attributes (`attributes.verdict_attributes`)


def describe(span: Span, attributes: Mapping[str, Any], verdict: Verdict, role: str) -> None:
    """The verdict's attributes (and what else the span learned as it ended), in one call: each pays the SDK's
    lock and value checks; and its ERROR status, if it has one."""
    try:
        span.set_attributes(attributes)
        if verdict.span_error:
            span.set_status(Status(StatusCode.ERROR, verdict.description))
    except Exception:
        fault(f"recording a {role} outcome")


def measure(record: Callable[[float, dict[str, Any]], None], seconds: float,
            attributes: Callable[[Outcome], dict[str, Any]], outcome: Outcome, measured: str) -> None:
    """A point of the side's operation-duration histogram, with the request's `attributes` for its verdict's
    `outcome`, in the current context (its span's: the exemplar)."""
    try:
        record(seconds, attributes(outcome))
    except Exception:
        fault(f"measuring a {measured}")


def end(span: Span, role: str) -> None:
    """Last: a span processor that raises here costs no measurement."""
    try:
        span.end()
    except Exception:
        fault(f"ending a {role} span")
