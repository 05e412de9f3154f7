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

import functools
import importlib.metadata
import importlib.util
import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.metrics import get_meter
from opentelemetry.trace import get_tracer
from packaging.requirements import Requirement
from packaging.version import Version

from otel_mcp_cancel import attributes, config, faults, tool_registry
from otel_mcp_cancel.config import Config
from otel_mcp_cancel.ghosts import LEDGER, GhostStats, ghost_stats
from otel_mcp_cancel.package import TASKS_EXTENSION, _instruments, _instruments_fastmcp_any
from otel_mcp_cancel.user_hooks import McpRequestInfo, McpResponseInfo
from otel_mcp_cancel.version import __version__

logger = logging.getLogger("otel_mcp_cancel")

__all__ = ["GhostStats", "McpCancelInstrumentor", "McpRequestInfo", "McpResponseInfo", "__version__", "ghost_stats"]


class McpCancelInstrumentor(BaseInstrumentor):
    """Instruments the mcp server with spans and metrics that carry each request's true outcome.

    Each set of hooks is made and applied when the package it hooks is imported (at once if it already is): a
    process pays for what it uses, so one that never imports standalone FastMCP, or mcp itself, pays nothing
    for them."""

    _hook_sets: list[Any] = []
    _applied: list[Any] = []
    _telemetry: dict[str, Any] | None = None
    _generation = 0  # each instrument() its own: an import hook left from an earlier one does nothing

    _loaded_early = False  # instrumented by `early_load`, before opentelemetry-instrument's loader got to it

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def instrument(self, **kwargs: Any) -> Any:
        if kwargs.pop("loaded_early", False):
            result = super().instrument(**kwargs)
            McpCancelInstrumentor._loaded_early = self._is_instrumented_by_opentelemetry
            return result
        if McpCancelInstrumentor._loaded_early and self._is_instrumented_by_opentelemetry:
            McpCancelInstrumentor._loaded_early = False
            return None  # the loader's own call for our entry point: done already, ahead of the others
        return super().instrument(**kwargs)

    def _instrument(self, **kwargs: Any) -> None:
        self._config = config.read()
        # Chosen once per instrumentation, as contrib's instrumentations read their stability opt-in.
        attributes.write_status_code_as(self._config.status_code_names)
        try:
            hook_makers = _hook_makers(self._config)
        except ImportError as exc:
            logger.warning("otel_mcp_cancel: mcp is not importable (%s); nothing is instrumented", exc)
            return
        import wrapt

        self._generation += 1
        self._options = kwargs
        self._hook_sets, self._applied = [], []
        by_trigger: dict[str, list[tuple[str, Callable[[Any], Any]]]] = {}
        for side, make, trigger in hook_makers:
            by_trigger.setdefault(trigger, []).append((side, make))
        for trigger, makers in by_trigger.items():
            wrapt.register_post_import_hook(functools.partial(self._imported, makers, self._generation), trigger)

    def _imported(self, makers: list[tuple[str, Callable[[Any], Any]]], generation: int, module: object) -> None:
        self._hook_in(makers, generation)

    def _hook_in(self, makers: list[tuple[str, Callable[[Any], Any]]], generation: int) -> None:
        """The package these hook sets hook was imported: make and apply them. Run inside the application's
        import, so nothing of it may raise."""
        with _HOOKING_IN:  # two threads may import two hooked packages at once
            if generation != self._generation:  # uninstrumented, or instrumented again, since
                return
            try:
                from otel_mcp_cancel.hooks import wrapping

                telemetry = self._telemetry if self._telemetry is not None else self._start_telemetry()
            except Exception:
                logger.exception("otel_mcp_cancel: hooking in failed; requests on that path are not traced")
                return
            for side, make in makers:  # each on its own: one that fails costs only its own hooks
                try:
                    hook_set = make(telemetry[side])
                    if hook_set.offers_waiting_spans:
                        telemetry[side].spans_wait = True
                    if hook_set.finds_current_record:
                        telemetry[side].records_current = True
                    self._hook_sets.append(hook_set)
                    self._applied += wrapping.apply(hook_set.hooks(), hook_set.reaches())
                except Exception:
                    logger.exception("otel_mcp_cancel: hooking in failed; requests on that path are not traced")

    def _start_telemetry(self) -> dict[str, Any]:
        """Both sides' telemetry, made once the first hooked package was imported."""
        from otel_mcp_cancel.client_telemetry import ClientTelemetry
        from otel_mcp_cancel.instruments import create_instruments
        from otel_mcp_cancel.liveness import Recording
        from otel_mcp_cancel.request_telemetry import SpanOptions
        from otel_mcp_cancel.retries import CallFingerprints, RecentCalls
        from otel_mcp_cancel.server_telemetry import ServerTelemetry
        from otel_mcp_cancel.user_hooks import UserHooks

        kwargs, chosen = self._options, self._config
        tracer = get_tracer(__name__, __version__, kwargs.get("tracer_provider"), schema_url=chosen.schema_url)
        meter = get_meter(__name__, __version__, kwargs.get("meter_provider"), schema_url=chosen.schema_url)
        instruments = create_instruments(meter)
        options = SpanOptions(
            cancelled_is_error=chosen.cancelled_is_error,
            capture_content=chosen.capture_content,
            user_hooks=UserHooks(kwargs.get("request_hook"), kwargs.get("response_hook")),
            recording=Recording(tracer, meter),
            tracer_provider=kwargs.get("tracer_provider"),
            meter_provider=kwargs.get("meter_provider"),
        )
        fingerprints = CallFingerprints(chosen.fingerprint_key) if chosen.fingerprint_key else None
        window = chosen.retry_window_seconds
        self._telemetry = {
            SERVER: ServerTelemetry(tracer, instruments, RecentCalls(window), options, fingerprints),
            CLIENT: ClientTelemetry(tracer, instruments, options, RecentCalls(window)),
        }
        return self._telemetry

    def _uninstrument(self, **kwargs: Any) -> None:
        McpCancelInstrumentor._loaded_early = False
        from otel_mcp_cancel.hooks import wrapping

        self._generation += 1  # an import after this one hooks nothing
        for hook_set in self._hook_sets:
            hook_set.stop()
        wrapping.remove(self._applied)
        self._hook_sets, self._applied, self._telemetry = [], [], None
        # What this instrumentation learned and counted goes with it; what is still in flight drains by itself.
        faults.reset()
        attributes.write_status_code_as(config.status_code_names(None))
        LEDGER.reset()
        tool_registry.reset()


SERVER, CLIENT = "server", "client"
_HOOKING_IN = threading.RLock()  # re-entered when hooking one package in imports another that is hooked
FASTMCP_DISTRIBUTIONS = ("fastmcp-slim", "fastmcp")
TASK_ENGINE_V1 = "mcp.server.experimental.request_context"


def _made(module: str, name: str, **options: Any) -> Callable[[Any], Any]:
    """A maker of the hook set `name` of `module`, which is imported only when the set is made."""
    return lambda telemetry: getattr(importlib.import_module(module), name)(telemetry, **options)


def _hook_makers(chosen: Config) -> list[tuple[str, Callable[[Any], Any], str]]:
    """Each hook set to apply, as (the side whose telemetry it reports to, its maker, the module whose import
    applies it), for the installed SDK line and frameworks; ImportError when mcp is missing."""
    return [*_sdk_hook_makers(chosen), *_fastmcp_hook_makers()]


def _sdk_hook_makers(chosen: Config) -> list[tuple[str, Callable[[Any], Any], str]]:
    mcp_version = Version(importlib.metadata.version("mcp"))
    if mcp_version.major == 1:
        guard, courtesy_cancel = chosen.ghost_guard, chosen.courtesy_cancel
        # Before 1.23 a client reads answers inside its receive loop, where nothing can observe one it drops.
        late_answers = mcp_version >= Version("1.23")
        makers = [
            (SERVER, _made("otel_mcp_cancel.hooks.server_v1", "ServerHooksV1", guard=guard), "mcp"),
            (CLIENT, _made("otel_mcp_cancel.hooks.client_v1", "ClientHooksV1", courtesy_cancel=courtesy_cancel,
                           late_answers=late_answers), "mcp"),
        ]
        # mcp 1.23 and later: experimental tasks, hooked as their engine is imported (it never is before 1.23)
        return [*makers, (SERVER, _made("otel_mcp_cancel.hooks.tasks_v1", "TaskHooksV1"), TASK_ENGINE_V1)]
    return [(SERVER, _made("otel_mcp_cancel.hooks.server_v2", "ServerHooksV2"), "mcp"),
            (CLIENT, _made("otel_mcp_cancel.hooks.client_v2", "ClientHooksV2"), "mcp")]


def _fastmcp_hook_makers() -> list[tuple[str, Callable[[Any], Any], str]]:
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
    major = int(version.split(".")[0])
    server = "otel_mcp_cancel.hooks.fastmcp_server"
    makers = [(SERVER, _made(server, "FastMCPServerHooks", major=major), "fastmcp")]
    if major >= 3:  # as its client is imported: a server that never calls out never imports that stack
        makers.append((CLIENT, _made(server, "FastMCPClientHooks", major=major), "fastmcp.client"))
    # Task engines, all on Docket: FastMCP 4's extension package (the 2026-07-28 tasks extension), and
    # FastMCP 2.x's and 3.x's own `task=True` with its optional Docket, hooked as Docket is imported.
    engine, trigger = (TASKS_EXTENSION, TASKS_EXTENSION) if major >= 4 else ("fastmcp", "docket")
    if _importable(trigger):
        tasks = "otel_mcp_cancel.hooks.tasks_fastmcp"
        # FastMCP 2.x serves a task only to the session that created it; 3.x to any of its caller's scope
        makers.append((SERVER, _made(tasks, "FastMCPTaskHooks", engine=engine, bound_to_session=major == 2), trigger))
        if major >= 4:
            makers.append((CLIENT, _made(tasks, "FastMCPTaskClientHooks"), trigger))
    return makers


def _fastmcp_distribution() -> tuple[str, str] | None:
    """(distribution, version) of what provides the importable `fastmcp` package, or None when it is not
    importable (a warning when no installed distribution provides it). Asks only FastMCP's two distributions,
    not every installed one (which costs a server's start-up tens of milliseconds)."""
    if not _importable("fastmcp"):
        return None
    installed = []
    for name in FASTMCP_DISTRIBUTIONS:  # fastmcp-slim first: since 4.0, fastmcp is a meta-package over it
        try:
            installed.append((name, importlib.metadata.distribution(name)))
        except importlib.metadata.PackageNotFoundError:
            continue
    for name, distribution in installed:
        if _provides_fastmcp(distribution):
            return name, distribution.version
    if installed:  # an editable install (a source checkout) lists no files: found by its name
        name, distribution = installed[0]
        return name, distribution.version
    logger.warning("otel_mcp_cancel: the fastmcp package is importable but no installed distribution provides "
                   "it, so its version is unknown; its requests are traced through the SDK alone")
    return None


def _provides_fastmcp(distribution: importlib.metadata.Distribution) -> bool:
    """Whether `distribution` installed the `fastmcp` package: read off its RECORD's text (parsing its thousands
    of entries into paths, as `files` does, costs a server's start-up milliseconds)."""
    record = distribution.read_text("RECORD")
    if record is not None:
        return record.startswith("fastmcp/") or "\nfastmcp/" in record
    return any(file.parts[0] == "fastmcp" for file in distribution.files or ())


def _importable(module: str) -> bool:
    """Whether a module is there to hook, without importing it (its parent packages are imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False
