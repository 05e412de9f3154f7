"""OpenTelemetry instrumentation for the MCP Python SDK that tells ok, failed and cancelled
tool calls apart and makes ghost responses visible.

Usage::

    from otel_mcp_cancel import McpCancelInstrumentor

    McpCancelInstrumentor().instrument()

or, with no code change, `opentelemetry-instrument python server.py` (entry point `mcp_cancel`).
`instrument()` takes `tracer_provider`, `meter_provider`, and the user's own `request_hook` and
`response_hook` (see `otel_mcp_cancel.user_hooks`).
"""

from __future__ import annotations

import atexit
import importlib.metadata
import importlib.util
import logging
import os
from collections.abc import Callable, Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.metrics import get_meter
from opentelemetry.trace import get_tracer
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from otel_mcp_cancel.conventions import SCHEMA_URL
from otel_mcp_cancel.environment_variables import (
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT,
    OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS,
    OTEL_PYTHON_MCP_CANCEL_COURTESY_CANCEL,
    OTEL_PYTHON_MCP_CANCEL_FINGERPRINT_KEY,
    OTEL_PYTHON_MCP_CANCEL_GHOST_GUARD,
    OTEL_PYTHON_MCP_CANCEL_RETRY_WINDOW_SECONDS,
)
from otel_mcp_cancel.ghosts import GhostStats, ghost_stats
from otel_mcp_cancel.package import _instruments, _instruments_fastmcp_any
from otel_mcp_cancel.version import __version__

logger = logging.getLogger("otel_mcp_cancel")

__all__ = ["GhostStats", "McpCancelInstrumentor", "__version__", "ghost_stats"]


class McpCancelInstrumentor(BaseInstrumentor):
    """Instruments the mcp server with spans and metrics that carry each request's true outcome."""

    _hook_sets: list[Any] = []
    _applied: list[Any] = []
    _at_exit: Callable[[], None] | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        try:
            hook_makers = _hook_makers()
        except ImportError as exc:
            logger.warning("otel_mcp_cancel: mcp is not importable (%s); nothing is instrumented", exc)
            return
        from otel_mcp_cancel.client_telemetry import ClientTelemetry
        from otel_mcp_cancel.flushing import Flusher
        from otel_mcp_cancel.hooks import wrapping
        from otel_mcp_cancel.instruments import create_instruments
        from otel_mcp_cancel.liveness import Recording
        from otel_mcp_cancel.request_telemetry import SpanOptions
        from otel_mcp_cancel.retries import RecentCalls
        from otel_mcp_cancel.server_telemetry import ServerTelemetry
        from otel_mcp_cancel.user_hooks import UserHooks

        tracer = get_tracer(__name__, __version__, kwargs.get("tracer_provider"), schema_url=SCHEMA_URL)
        meter = get_meter(__name__, __version__, kwargs.get("meter_provider"), schema_url=SCHEMA_URL)
        instruments = create_instruments(meter)
        options = SpanOptions(
            cancelled_is_error=_cancelled_is_error(),
            capture_content=_capture_content(),
            user_hooks=UserHooks(kwargs.get("request_hook"), kwargs.get("response_hook")),
            recording=Recording(tracer, meter),
            tracer_provider=kwargs.get("tracer_provider"),
        )
        telemetry = {
            SERVER: ServerTelemetry(tracer, instruments, RecentCalls(_retry_window()), options, _fingerprints(),
                                    Flusher(kwargs.get("tracer_provider"), kwargs.get("meter_provider"))),
            CLIENT: ClientTelemetry(tracer, instruments, options, RecentCalls(_retry_window())),
        }
        self._hook_sets = [make(telemetry[side]) for side, make in hook_makers]
        for (side, _), hook_set in zip(hook_makers, self._hook_sets):
            if hook_set.offers_waiting_spans:
                telemetry[side].spans_wait = True
            if hook_set.finds_current_record:
                telemetry[side].records_current = True
        self._applied = wrapping.apply([hook for hook_set in self._hook_sets for hook in hook_set.hooks()])
        # Registered after the providers were made (and their own exit hooks, which export, registered): runs first.
        self._at_exit = telemetry[SERVER].process_ending
        atexit.register(self._at_exit)

    def _uninstrument(self, **kwargs: Any) -> None:
        from otel_mcp_cancel.hooks import wrapping

        for hook_set in self._hook_sets:
            hook_set.stop()
        wrapping.remove(self._applied)
        if self._at_exit is not None:
            atexit.unregister(self._at_exit)
        self._hook_sets, self._applied, self._at_exit = [], [], None


SERVER, CLIENT = "server", "client"
FASTMCP_DISTRIBUTIONS = ("fastmcp-slim", "fastmcp")
TASK_ENGINE_V1 = "mcp.server.experimental.request_context"


def _hook_makers() -> list[tuple[str, Callable[[Any], Any]]]:
    """Each hook set to apply, as (the side whose telemetry it reports to, its maker), for the installed
    SDK line and frameworks; ImportError when mcp is missing."""
    return [*_sdk_hook_makers(), *_fastmcp_hook_makers()]


def _sdk_hook_makers() -> list[tuple[str, Callable[[Any], Any]]]:
    if importlib.metadata.version("mcp").split(".")[0] == "1":
        from otel_mcp_cancel.hooks.client_v1 import ClientHooksV1
        from otel_mcp_cancel.hooks.server_v1 import ServerHooksV1

        guard = _choice(OTEL_PYTHON_MCP_CANCEL_GHOST_GUARD, ("on", "off")) == "on"
        courtesy_cancel = _choice(OTEL_PYTHON_MCP_CANCEL_COURTESY_CANCEL, ("off", "on")) == "on"
        makers: list[tuple[str, Callable[[Any], Any]]] = [
            (SERVER, lambda telemetry: ServerHooksV1(telemetry, guard=guard)),
            (CLIENT, lambda telemetry: ClientHooksV1(telemetry, courtesy_cancel=courtesy_cancel)),
        ]
        if _importable(TASK_ENGINE_V1):  # mcp 1.23 and later: experimental tasks
            from otel_mcp_cancel.hooks.tasks_v1 import TaskHooksV1

            makers.append((SERVER, TaskHooksV1))
        return makers
    from otel_mcp_cancel.hooks.client_v2 import ClientHooksV2
    from otel_mcp_cancel.hooks.server_v2 import ServerHooksV2

    return [(SERVER, ServerHooksV2), (CLIENT, ClientHooksV2)]


def _fastmcp_hook_makers() -> list[tuple[str, Callable[[Any], Any]]]:
    """FastMCP's hooks when its package is importable within the supported range; nothing (and a warning)
    when it is importable but not hooked."""
    found = _fastmcp_distribution()
    if found is None:
        return []
    name, version = found
    supported = [Requirement(spec) for spec in _instruments_fastmcp_any]
    if not any(requirement.name == name and version in requirement.specifier for requirement in supported):
        logger.warning("otel_mcp_cancel: FastMCP %s (distribution %s) is outside the supported %s; its requests "
                       "are traced through the SDK alone", version, name, " or ".join(_instruments_fastmcp_any))
        return []
    from otel_mcp_cancel.hooks.fastmcp_server import FastMCPClientHooks, FastMCPServerHooks

    major = int(version.split(".")[0])
    makers: list[tuple[str, Callable[[Any], Any]]] = [(SERVER, lambda telemetry: FastMCPServerHooks(telemetry, major))]
    if major >= 3:
        makers.append((CLIENT, FastMCPClientHooks))
    # Task engines, all on Docket: FastMCP 4's extension package (the 2026-07-28 tasks extension), and
    # FastMCP 2.x's and 3.x's own `task=True` with its optional Docket.
    engine = "fastmcp_tasks" if major >= 4 else "fastmcp"
    if _importable(engine if major >= 4 else "docket"):
        from otel_mcp_cancel.hooks.tasks_fastmcp import FastMCPTaskClientHooks, FastMCPTaskHooks

        # FastMCP 2.x serves a task only to the session that created it; 3.x to any of its caller's scope
        makers.append((SERVER, lambda telemetry: FastMCPTaskHooks(telemetry, engine, bound_to_session=major == 2)))
        if engine == "fastmcp_tasks":
            makers.append((CLIENT, FastMCPTaskClientHooks))
    return makers


def _fastmcp_distribution() -> tuple[str, str] | None:
    """(distribution, version) of what provides the importable `fastmcp` package, or None when it is not
    importable (a warning when no installed distribution claims it)."""
    if not _importable("fastmcp"):
        return None
    providers = importlib.metadata.packages_distributions().get("fastmcp")
    if providers:
        return canonicalize_name(providers[0]), importlib.metadata.version(providers[0])
    # An editable install (a source checkout) lists no files, so no distribution claims the package: ask for
    # the distributions that provide it by name (fastmcp-slim first: since 4.0 fastmcp is a meta-package).
    for name in FASTMCP_DISTRIBUTIONS:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    logger.warning("otel_mcp_cancel: the fastmcp package is importable but no installed distribution provides "
                   "it, so its version is unknown; its requests are traced through the SDK alone")
    return None


def _importable(module: str) -> bool:
    """Whether a module is there to hook, without importing it (its parent packages are imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _capture_content() -> bool:
    """The GenAI instrumentations' shared opt-in; anything but true keeps tool content out."""
    return os.environ.get(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, "").strip().lower() == "true"


def _cancelled_is_error() -> bool:
    return _choice(OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS, ("unset", "error")) == "error"


def _fingerprints() -> Any:
    from otel_mcp_cancel.retries import CallFingerprints

    key = os.environ.get(OTEL_PYTHON_MCP_CANCEL_FINGERPRINT_KEY, "")
    return CallFingerprints(key) if key else None


def _retry_window() -> float:
    from otel_mcp_cancel.retries import DEFAULT_WINDOW_SECONDS

    raw = os.environ.get(OTEL_PYTHON_MCP_CANCEL_RETRY_WINDOW_SECONDS, str(DEFAULT_WINDOW_SECONDS))
    try:
        return max(float(raw), 0.0)
    except ValueError:
        logger.warning("otel_mcp_cancel: %s=%r is not a number of seconds; using %s",
                       OTEL_PYTHON_MCP_CANCEL_RETRY_WINDOW_SECONDS, raw, DEFAULT_WINDOW_SECONDS)
        return DEFAULT_WINDOW_SECONDS


def _choice(variable: str, allowed: tuple[str, ...]) -> str:
    """The variable's value if allowed, else (with a warning) the first allowed value, the default."""
    value = os.environ.get(variable, allowed[0]).strip().lower()
    if value not in allowed:
        logger.warning("otel_mcp_cancel: %s=%r is not one of %s; using %r", variable, value, allowed, allowed[0])
        return allowed[0]
    return value
