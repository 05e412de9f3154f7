"""The instrumentor's contract with its host: loading, unloading, suppression, and never breaking a request."""

from __future__ import annotations

import atexit
import importlib.resources
import importlib.util
import json
import logging
import subprocess
import sys
from importlib.metadata import entry_points, requires

import pytest
import wrapt
from opentelemetry.instrumentation.utils import (
    suppress_instrumentation,
)
from opentelemetry.trace import SpanKind, StatusCode
from packaging.requirements import Requirement

from otel_mcp_cancel import McpCancelInstrumentor, _hook_makers, config
from otel_mcp_cancel.hooks import wrapping
from otel_mcp_cancel.package import _instruments, _instruments_fastmcp_any
from tests.conftest import SPANS, TRACER_PROVIDER, instrumented
from tests.raw_peer import raw_session
from tests.servers import Gates, notes_server
from tests.support import MCP_MAJOR, only_v2

SCOPE = "otel_mcp_cancel"
SDK_SCOPE = "mcp-python-sdk"  # mcp 2.x's own OpenTelemetryMiddleware
WRAPPER = getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)


def installed_hooks() -> list[wrapping.Hook]:
    """The hook points of the installed SDK line and frameworks: of each hook set whose package is installed (it
    is applied as that package is imported; the tests' own imports have imported each)."""
    makers = _hook_makers(config.read())
    return [hook for _, make, trigger in makers if installed(trigger) for hook in make(None).hooks()]


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def hooked_callables() -> list[object]:
    return [getattr(*wrapping.target(hook)) for hook in installed_hooks()]


async def two_calls() -> None:
    async with raw_session(notes_server(Gates())) as peer:
        await peer.call(1, "tools/call", {"name": "echo", "arguments": {"text": "a"}})
        await peer.call(2, "tools/call", {"name": "broken", "arguments": {"text": "b"}})


def request_spans(scope: str) -> list:
    return [
        s
        for s in SPANS.get_finished_spans()
        if s.instrumentation_scope.name == scope
        and s.kind is SpanKind.SERVER
        and s.attributes.get("mcp.method.name") == "tools/call"
    ]


@pytest.mark.parametrize(
    ("extra_name", "declared_specs"),
    [
        ("instruments", _instruments),
        ("fastmcp", _instruments_fastmcp_any[:1]),
        ("fastmcp-slim", _instruments_fastmcp_any[1:]),
    ],
)
def test_extras_equal_package_instruments(extra_name: str, declared_specs: tuple[str, ...]) -> None:
    """opentelemetry-instrument reads the package metadata; it must say what package.py says."""
    marker = f"extra == '{extra_name}'"
    extra = [Requirement(line) for line in requires("otel-mcp-cancel") or [] if marker in line]
    declared = [Requirement(spec) for spec in declared_specs]
    assert [(r.name, r.specifier) for r in extra] == [(r.name, r.specifier) for r in declared]


@pytest.mark.parametrize(("specs", "admitted", "refused"), [
    (_instruments, ["1.12.3", "1.30.0", "2.3.0", "2.9.0", "2.99.1"], ["1.12.2", "3.0.0"]),
    (_instruments_fastmcp_any[:1], ["2.14.0", "4.2.3", "4.9.0"], ["2.13.9", "5.0.0"]),
    (_instruments_fastmcp_any[1:], ["3.3.0", "4.9.0"], ["5.0.0"]),
])
def test_the_ranges_admit_every_minor_to_the_next_major(specs: tuple[str, ...], admitted: list[str],
                                                        refused: list[str]) -> None:
    (specifier,) = [Requirement(spec).specifier for spec in specs]
    assert [version in specifier for version in admitted + refused] == [True] * len(admitted) + [False] * len(refused)


def test_entry_point_loads_the_instrumentor() -> None:
    (entry_point,) = entry_points(group="opentelemetry_instrumentor", name="mcp_cancel")
    assert entry_point.load() is McpCancelInstrumentor


def test_opentelemetry_instrument_loads_ours_ahead_of_every_instrumentor_once(monkeypatch, caplog) -> None:
    """The pre-instrument entry point instruments (unless ours is disabled); the loader's own call for our entry
    point then finds it done, without the base class's "already instrumented" warning; uninstrument undoes it."""
    (early,) = [e for e in entry_points(group="opentelemetry_pre_instrument") if e.name == "mcp_cancel"]
    instrumentor = McpCancelInstrumentor()
    caplog.set_level(logging.WARNING)
    for disabled in ("mcp_cancel", "requests, mcp_cancel", "*"):
        monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", disabled)
        early.load()()
        assert not instrumentor.is_instrumented_by_opentelemetry
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "requests")
    early.load()()
    try:
        assert instrumentor.is_instrumented_by_opentelemetry
        (ours,) = [e for e in entry_points(group="opentelemetry_instrumentor") if e.name == "mcp_cancel"]
        ours.load()().instrument(skip_dep_check=True)  # as the loader calls it
        assert instrumentor.is_instrumented_by_opentelemetry
        assert [r.getMessage() for r in caplog.records if "instrument" in r.getMessage()] == []
        instrumentor.instrument()  # a second call of the user's own: the base class's warning, as ever
        assert [r.getMessage() for r in caplog.records] == ["Attempting to instrument while already instrumented"]
    finally:
        instrumentor.uninstrument()
    assert not instrumentor.is_instrumented_by_opentelemetry


def test_the_installed_package_carries_its_type_marker() -> None:
    """What was installed (CI installs the built wheel) tells type checkers the package is typed."""
    assert (importlib.resources.files("otel_mcp_cancel") / "py.typed").is_file()


def test_every_hook_point_of_the_installed_line_exists() -> None:
    """If an SDK release drops or renames a hook point, this fails instead of tracing silently less."""
    instrumentor = McpCancelInstrumentor()
    instrumentor.instrument(tracer_provider=TRACER_PROVIDER)
    try:
        applied = sorted((hook.module, hook.attribute) for hook in instrumentor._applied)
        assert applied == sorted((hook.module, hook.attribute) for hook in installed_hooks())
    finally:
        instrumentor.uninstrument()


@pytest.mark.anyio
async def test_uninstrument_restores_every_hook() -> None:
    originals = hooked_callables()
    owned = [name in vars(owner) for owner, name in map(wrapping.target, installed_hooks())]
    instrumentor = McpCancelInstrumentor()
    instrumentor.instrument(tracer_provider=TRACER_PROVIDER)
    assert all(isinstance(target, WRAPPER) for target in hooked_callables())
    instrumentor.uninstrument()
    assert hooked_callables() == originals
    # A method the class inherited is inherited again, not left behind as the class's own copy.
    assert [name in vars(owner) for owner, name in map(wrapping.target, installed_hooks())] == owned
    assert not any(isinstance(target, WRAPPER) for target in hooked_callables())
    SPANS.clear()
    await two_calls()
    assert request_spans(SCOPE) == []
    if MCP_MAJOR == 2:
        # Without us the SDK's own middleware traces each request once.
        assert sorted(s.name for s in request_spans(SDK_SCOPE)) == ["tools/call broken", "tools/call echo"]


@pytest.mark.anyio
async def test_no_exit_hook_until_a_server_serves_then_one_and_none_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook that ends what a serving process holds as it exits: none at instrument(), one once a server
    serves, whatever is instrumented or served again, and unregistered by uninstrument() (the registry itself
    is the interpreter's)."""
    calls: list[tuple[str, object]] = []
    for name in ("register", "unregister"):
        real = getattr(atexit, name)
        monkeypatch.setattr(atexit, name, lambda hook, real=real, name=name: (calls.append((name, hook)), real(hook)))
    instrumentor = McpCancelInstrumentor()
    instrumentor.instrument(tracer_provider=TRACER_PROVIDER)
    instrumentor.instrument(tracer_provider=TRACER_PROVIDER)
    assert calls == []
    try:
        await two_calls()
        await two_calls()
    finally:
        instrumentor.uninstrument()
    (registered, hook), unregistered = calls
    assert (registered, unregistered) == ("register", ("unregister", hook))


@pytest.mark.anyio
async def test_a_wrapper_kept_after_uninstrument_is_a_pass_through() -> None:
    instrumentor = McpCancelInstrumentor()
    instrumentor.instrument(tracer_provider=TRACER_PROVIDER)
    kept = [(owner, name, owner.__dict__[name]) for owner, name in map(wrapping.target, installed_hooks())]
    instrumentor.uninstrument()
    SPANS.clear()
    for owner, name, wrapper in kept:
        setattr(owner, name, wrapper)
    try:
        await two_calls()
    finally:
        for hook, (owner, name, wrapper) in zip(installed_hooks(), kept):
            setattr(owner, name, wrapper.__wrapped__)
            if hook.inherited:
                delattr(owner, name)
    assert request_spans(SCOPE) == []


@pytest.mark.anyio
async def test_instrumenting_twice_is_harmless(captured) -> None:
    McpCancelInstrumentor().instrument(tracer_provider=TRACER_PROVIDER)
    assert not any(isinstance(target.__wrapped__, WRAPPER) for target in hooked_callables())
    await two_calls()
    assert sorted(s.name for s in request_spans(SCOPE)) == ["tools/call broken", "tools/call echo"]
    assert request_spans(SDK_SCOPE) == []


@pytest.mark.anyio
async def test_suppress_instrumentation_is_honoured(captured) -> None:
    with suppress_instrumentation():
        await two_calls()
    assert request_spans(SCOPE) == []
    assert captured.points("mcp.server.operation.duration") == []


@pytest.mark.anyio
async def test_cancelled_spans_can_be_marked_error(monkeypatch) -> None:
    gates = Gates()
    with instrumented(monkeypatch, OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS="error"):
        async with raw_session(notes_server(gates)) as peer:
            await peer.request(1, "tools/call", {"name": "slow", "arguments": {"text": "x"}})
            await gates.started.wait()
            await peer.cancel(1, "stop")
            await peer.barrier("b")
            await peer.call(2, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
        spans = {s.attributes["jsonrpc.request.id"]: s for s in request_spans(SCOPE)}
    assert spans["1"].attributes["tool.outcome"] == "cancelled"
    assert spans["1"].status.status_code is StatusCode.ERROR
    assert "error.type" not in spans["1"].attributes
    assert spans["2"].status.status_code is StatusCode.UNSET


def test_a_capability_with_a_missing_hook_point_is_left_whole_with_one_warning(caplog) -> None:
    """Its other hook, present, is not applied either: a capability is missing rather than half there."""
    caplog.set_level(logging.WARNING, logger="otel_mcp_cancel")
    present = wrapping.Hook("json", "dumps", print, "a capability")
    missing = wrapping.Hook("json", "no_such_function", print, "a capability")
    assert wrapping.apply([present, missing, missing]) == []
    (line,) = [record for record in caplog.records if record.name == "otel_mcp_cancel"]
    assert line.getMessage() == (
        "otel_mcp_cancel: a capability: not observed on this release "
        "(`json.no_such_function` is not there); everything else is, as before")
    assert line.__dict__["otel_mcp_cancel.lost_capability"] == "a capability"
    assert not isinstance(json.dumps, WRAPPER)


def run_python(script: str) -> list[str]:
    """What a fresh interpreter running `script` prints, a line each; it must exit cleanly."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


# What a hooked package's import brings in: an SDK class whose method is hooked, and the plugin's telemetry.
HOOKED_SDK_METHOD = "mcp.shared.session:BaseSession.send_request" if MCP_MAJOR == 1 else (
    "mcp.shared.jsonrpc_dispatcher:JSONRPCDispatcher._handle_request")
PROBE = f"""
import importlib, sys, wrapt
from otel_mcp_cancel import McpCancelInstrumentor
def hooked(path=\"{HOOKED_SDK_METHOD}\"):
    module, _, attribute = path.partition(":")
    owner, name = attribute.split(".")
    proxy = getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)
    return isinstance(getattr(getattr(importlib.import_module(module), owner), name), proxy)
def loaded(*modules):
    return " ".join(str(module in sys.modules) for module in modules)
"""


def test_instrument_imports_nothing_until_the_hooked_package_is_imported() -> None:
    """A process that never imports mcp (any process under opentelemetry-instrument, in an environment that has
    mcp) pays for none of it, nor for the plugin's telemetry; importing mcp hooks it then."""
    lines = run_python(PROBE + (
        "McpCancelInstrumentor().instrument()\n"
        "print(loaded('mcp', 'otel_mcp_cancel.request_telemetry'))\n"
        "import mcp\n"
        "print(loaded('otel_mcp_cancel.request_telemetry'), hooked())\n"
    ))
    assert lines == ["False", "False", "True", "True"]


def test_the_configuration_is_read_as_instrument_runs_not_as_mcp_is_imported() -> None:
    """What the environment says when instrument() runs holds, whatever it says by the time mcp is imported."""
    lines = run_python(PROBE + (
        "import os\n"
        "os.environ['OTEL_SEMCONV_STABILITY_OPT_IN'] = 'rpc'\n"
        "instrumentor = McpCancelInstrumentor()\n"
        "instrumentor.instrument()\n"
        "del os.environ['OTEL_SEMCONV_STABILITY_OPT_IN']\n"
        "import mcp\n"
        "print(instrumentor._config.status_code_names, instrumentor._config.schema_url)\n"
        "from otel_mcp_cancel import attributes\n"
        "print(attributes._status_code_names)\n"
    ))
    assert lines == ["('rpc.status_code',)", "https://opentelemetry.io/schemas/1.45.0", "('rpc.status_code',)"]


def test_an_import_after_uninstrument_hooks_nothing() -> None:
    lines = run_python(PROBE + (
        "McpCancelInstrumentor().instrument()\n"
        "McpCancelInstrumentor().uninstrument()\n"
        "import mcp\n"
        "print(loaded('otel_mcp_cancel.request_telemetry'), hooked())\n"
    ))
    assert lines == ["False", "False"]


# What a process has that the plugin must not change before a server serves: SIGTERM's handler, its threads,
# its exit hooks.
PROCESS_STATE = """
import atexit, signal, threading
def state():
    default = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    print(f"sigterm-default={default} threads={threading.active_count()} atexit={atexit._ncallbacks()}")
"""
IMPORTS_EVERY_SIDE = "import mcp, mcp.server.stdio, mcp.client.session, mcp.client.stdio\n"


def test_instrumenting_and_importing_mcp_leave_sigterm_threads_and_exit_hooks_as_they_were() -> None:
    """No signal handler, thread or exit hook until a server serves: instrumented, with every side of mcp
    imported, a process has what the same process has without the plugin; and uninstrument() changes nothing."""
    alone = run_python(PROCESS_STATE + IMPORTS_EVERY_SIDE + "state()\n")
    instrumented = run_python(PROCESS_STATE + PROBE + (
        "McpCancelInstrumentor().instrument()\n" + IMPORTS_EVERY_SIDE + "print(hooked())\nstate()\n"
        "McpCancelInstrumentor().uninstrument()\nstate()\n"))
    assert alone[0] == "sigterm-default=True"
    assert instrumented == ["True", *alone, *alone]


def test_a_failure_while_hooking_in_never_breaks_the_applications_import() -> None:
    lines = run_python(PROBE + (
        "import logging; logging.basicConfig()\n"
        "import otel_mcp_cancel.hooks.wrapping as wrapping\n"
        "def broken(hooks): raise RuntimeError('a defect of ours')\n"
        "wrapping.apply = broken\n"
        "McpCancelInstrumentor().instrument()\n"
        "import mcp.server\n"
        "print(hooked(), 'imported')\n"
    ))
    assert lines == ["False", "imported"]


@pytest.mark.skipif(importlib.util.find_spec("fastmcp") is None, reason="standalone FastMCP is not installed")
def test_standalone_fastmcp_installed_but_not_imported_is_not_imported() -> None:
    """A server on the SDK alone, in an environment that has FastMCP (an agent framework's dependency, say): its
    start-up never imports FastMCP for the plugin; a process that imports FastMCP has it hooked."""
    lines = run_python(PROBE + (
        "McpCancelInstrumentor().instrument()\n"
        "import mcp.server\n"
        "print(hooked(), loaded('fastmcp', 'otel_mcp_cancel.hooks.fastmcp_server'))\n"
        "import fastmcp\n"
        "print(loaded('otel_mcp_cancel.hooks.fastmcp_server'))\n"
    ))
    assert lines == ["True", "False", "False", "True"]


def test_import_and_instrument_without_mcp_installed() -> None:
    script = (
        "import sys, logging; sys.modules['mcp'] = None\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        "import otel_mcp_cancel\n"
        "otel_mcp_cancel.McpCancelInstrumentor().instrument()\n"
        "otel_mcp_cancel.McpCancelInstrumentor().uninstrument()\n"
        "print('host-still-running')\n"
    )
    assert run_python(script) == ["host-still-running"]


@only_v2
@pytest.mark.anyio
async def test_the_sdk_middleware_still_traces_notifications(captured) -> None:
    await two_calls()
    notification_spans = [s for s in SPANS.get_finished_spans() if s.name == "notifications/initialized"]
    assert [s.instrumentation_scope.name for s in notification_spans] == [SDK_SCOPE]
