"""Every metric this plugin records, created once from one meter."""

from __future__ import annotations

from typing import NamedTuple

from opentelemetry.metrics import Counter, Histogram, Meter

from otel_mcp_cancel.conventions import (
    CLIENT_OPERATION_DURATION,
    CLIENT_SESSION_DURATION,
    GHOST_RESPONSES,
    SERVER_GHOST_RETRIES,
    SERVER_OPERATION_DURATION,
    SERVER_SESSION_DURATION,
)

# Tool calls run from milliseconds to minutes; semconv's default buckets stop too early.
DURATION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
# Sessions run from one call to a working day; the same rule, further out.
SESSION_DURATION_BUCKETS = (0.1, 1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400)


class Instruments(NamedTuple):  # a named tuple, not a frozen dataclass: made in a tenth of the time
    server_operation_duration: Histogram
    ghost_responses: Counter
    server_ghost_retries: Counter
    client_operation_duration: Histogram
    server_session_duration: Histogram
    client_session_duration: Histogram


def create_instruments(meter: Meter) -> Instruments:
    return Instruments(
        server_operation_duration=meter.create_histogram(
            SERVER_OPERATION_DURATION,
            unit="s",
            description="MCP request duration as observed on the server, from receipt until the answer is written "
            "or the request settles unanswered.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        ),
        ghost_responses=meter.create_counter(
            GHOST_RESPONSES,
            unit="{response}",
            description="Requests whose handler completed (side effects done) while their caller was told, or "
            "believes, they were cancelled; by tool.ghost_kind, a client's (late_answer) apart from a server's.",
        ),
        server_ghost_retries=meter.create_counter(
            SERVER_GHOST_RETRIES,
            unit="{retry}",
            description="Calls that repeat a ghost: same session, same tool, same arguments, within the retry window.",
        ),
        client_operation_duration=meter.create_histogram(
            CLIENT_OPERATION_DURATION,
            unit="s",
            description="MCP request duration as observed on the sender, from sending until the answer arrives "
            "or the caller gives up.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        ),
        server_session_duration=meter.create_histogram(
            SERVER_SESSION_DURATION,
            unit="s",
            description="MCP session duration as observed on the server, from the start of its serving loop until "
            "its stream closes or an error ends it.",
            explicit_bucket_boundaries_advisory=list(SESSION_DURATION_BUCKETS),
        ),
        client_session_duration=meter.create_histogram(
            CLIENT_SESSION_DURATION,
            unit="s",
            description="MCP session duration as observed on the client, from entering its session until leaving it.",
            explicit_bucket_boundaries_advisory=list(SESSION_DURATION_BUCKETS),
        ),
    )
