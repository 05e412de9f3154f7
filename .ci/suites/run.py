"""Run a project's own test suite without and with otel-mcp-cancel, and fail on any difference we caused.

    python .ci/suites/run.py mcp 2.3.0 WORKDIR        (a Python with `packaging`, e.g. a venv of .ci/run)
    python .ci/suites/run.py fastmcp 4.2.3 WORKDIR

From the sdist of PROJECT==VERSION (its tests ship in it): tag it as its release (the build reads the version
from git), install it, its workspace packages and its test dependencies pinned from the `uv.lock` inside it,
and this checkout. Then run the project's selection (SUITES) with the plugin (see otel_session.py), and the
tests that failed there again without it (OTEL_MCP_SUITE_MODE=off): what passes with the plugin is not changed
by it, so the suite runs in full once. A test that failed with the plugin, twice, and passed without it, twice,
is ours unless it also fails with tracing on and no plugin (a plain global TracerProvider: mcp 2.x then puts
`traceparent` into `_meta` itself) or is a known difference of that project, listed by cause. Any fault line
the plugin logged fails the run too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import tomllib
from packaging.markers import Marker
from packaging.requirements import Requirement

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent.parent
# Development tools the tests do not run (and a git-only source no registry here serves).
NOT_FOR_TESTS = {"pyright", "ruff", "strict-no-cover", "ty", "prek", "loq", "pdbpp"}
SUITE_SECONDS = 30 * 60


@dataclass(frozen=True)
class Suite:
    """What of a project's suite runs, how the plugin is set up in it, and the differences we know the cause of."""

    mode: str  # plugin | plugin-global: instrument() with its own providers, or with the suite's global ones
    selection: tuple[str, ...] = ()  # pytest's selection of the whole suite: paths, -m (none: all)
    options: tuple[str, ...] = ()  # pytest's options for every run, the reruns of single tests included
    test_imports: tuple[str, ...] = ()  # imported by the tests but named in no dependency group
    known: dict[str, tuple[str, ...]] = field(default_factory=dict)  # cause -> node id prefixes
    # Packages of the suite's environment the registry here cannot serve, and why: left out with the extras
    # that bring them in; the test files that import them are not collected, which is reported, not failed.
    not_served: dict[str, str] = field(default_factory=dict)
    extras_left_out: frozenset[str] = frozenset()


# mcp: tests that look at the SDK's own OpenTelemetryMiddleware / "MCP send" spans (ours take their place), and
# tests that assert the exact `params` a client puts on the wire. With tracing on, the W3C trace context rides
# in `params._meta`: mcp 2.x puts it there itself (its such tests fail with tracing alone), and on 1.x the
# plugin does the same, for requests without params too. By design, not a change to the host.
MCP_KNOWN = {
    "they inspect the SDK's own spans, which ours replace": (
        "tests/server/test_otel.py", "tests/shared/test_otel.py", "tests/docs_src/test_opentelemetry.py"),
    "they assert a request's exact params, which carry the trace context in `_meta`": (
        "tests/client/test_session.py::test_client_tool_call_with_meta[meta1]",
        "tests/client/test_list_methods_cursor.py::test_list_methods_cursor_parameter[",
        "tests/client/test_list_methods_cursor.py::test_list_methods_params_parameter[",
    ),
}
# tests/docs: the docs toolchain's own tests, which need the docs dependency group.
MCP_SUITE = Suite("plugin", options=("--ignore=tests/docs",), test_imports=("requests",), known=MCP_KNOWN)
# FastMCP: its unit selection (its own markers: no integration, subprocess or conformance tests), under the
# suite's own global tracer provider, as FastMCP users run the plugin beside FastMCP's telemetry.
# A test that hangs (one did, in an event loop's teardown under load) is stopped by pytest-timeout's thread
# method, which ends its worker: a failure, never a stalled run. FastMCP's own limit (5 s a test) is kept.
FASTMCP_TIMEOUTS = ("--timeout-method=thread",)
FASTMCP_MARKERS = ("-m", "not integration and not client_process and not subprocess_heavy and not conformance "
                   "and not pbt")
FASTMCP_UNITS = ("tests", "--ignore=tests/integration_tests", "--ignore=tests/conformance", "--ignore=tests/pbt",
                 *FASTMCP_MARKERS)
# FastMCP 3.x: its telemetry folders (its request-handling folders, tests/server and tests/client, take 6 more
# minutes; run by hand, they show no test changed by the plugin).
FASTMCP_TELEMETRY = ("tests/telemetry", "tests/server/telemetry", "tests/client/telemetry", *FASTMCP_MARKERS)
# FastMCP's telemetry tests that look for what, by design, is ours (docs/frameworks.md, "FastMCP's own spans";
# docs/telemetry.md).
FASTMCP_KNOWN = {
    "they select FastMCP's request spans by instrumentation scope; those spans are ours, under our scope": (
        "tests/telemetry/test_exception_recording.py::test_component_failure_records_exception_once_per_span[",
        "tests/telemetry/test_interop.py::TestEndToEnd::test_suppress_block_silences_a_single_call",
    ),
    "they expect no request span with FastMCP's telemetry off; that setting governs FastMCP's spans, not ours": (
        "tests/server/telemetry/test_server_tracing.py::TestTelemetryEnabledByDefault::"
        "test_off_switch_suppresses_spans_via_client",
        "tests/telemetry/test_interop.py::TestEndToEnd::test_propagation_only_parents_downstream_user_spans",
    ),
    "they look for the SDK's own `MCP send` client span, which ours replaces": (
        "tests/server/telemetry/test_server_tracing.py::TestSingleServerSpan::test_server_span_shares_client_trace",
        "tests/server/telemetry/test_server_tracing.py::TestProtocolVersionAttribute::"
        "test_server_span_has_jsonrpc_request_id",
    ),
    "they expect FastMCP's error.type and status; ours follow the conventions (the JSON-RPC code; a caller's "
    "error leaves a server span UNSET)": (
        "tests/server/telemetry/test_server_tracing.py::TestFailurePathServerSpan::"
        "test_middleware_error_before_handler_emits_error_span",
        "tests/server/telemetry/test_server_tracing.py::TestProtocolVersionAttribute::"
        "test_jsonrpc_error_reports_error_code",
    ),
    "they expect a span named for a tool or prompt the server does not serve; such names fold (bounded names)": (
        "tests/client/telemetry/test_client_tracing.py::TestClientErrorTracing::test_get_prompt_error_creates_spans",
        "tests/client/telemetry/test_client_tracing.py::TestClientErrorTracing::"
        "test_call_nonexistent_tool_creates_spans",
    ),
}
FASTMCP_4_NOT_SERVED = {"fastmcp-tasks": "it needs pydocket>=0.29.1; the newest served here is 0.27.2"}
SUITES = {
    "mcp": MCP_SUITE,
    "fastmcp==4": Suite("plugin-global", FASTMCP_UNITS, FASTMCP_TIMEOUTS, known=FASTMCP_KNOWN,
                        not_served=FASTMCP_4_NOT_SERVED, extras_left_out=frozenset({"tasks"})),
    "fastmcp==3": Suite("plugin-global", FASTMCP_TELEMETRY, FASTMCP_TIMEOUTS, known=FASTMCP_KNOWN),
}


def suite_of(project: str, version: str) -> Suite:
    return SUITES.get(project) or SUITES[f"{project}=={version.split('.')[0]}"]


def run(*command: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    print("+", " ".join(map(str, command)), flush=True)
    subprocess.run([str(part) for part in command], cwd=cwd, env=env, check=True)


def unpack(project: str, version: str, work: Path) -> Path:
    # The project's sdist only: `:all:` would build its build backend and their dependencies from source too,
    # minutes on a machine with no pip cache.
    run(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", project,
        f"{project}=={version}", "-d", work)
    with tarfile.open(work / f"{project}-{version}.tar.gz") as sdist:
        sdist.extractall(work, filter="data")
    source = work / f"{project}-{version}"
    git = ("git", "-c", "user.name=ci", "-c", "user.email=ci@localhost")
    run(*git, "init", "-q", cwd=source)
    run(*git, "add", "-A", cwd=source)
    run(*git, "commit", "-q", "-m", f"{project} {version} sdist", cwd=source)
    run(*git, "tag", f"v{version}", cwd=source)
    return source


def install(source: Path, work: Path, suite: Suite) -> Path:
    lock = tomllib.loads((source / "uv.lock").read_text())
    # `==V.*`: a release the registry replaced with a post-release (certifi's) still resolves.
    pinned = [f"{p['name']}=={p['version']}.*" for p in lock["package"] if "registry" in p.get("source", {})
              and any(Marker(m).evaluate() for m in p.get("resolution-markers", ["python_version >= '3'"]))]
    (work / "constraints.txt").write_text("\n".join(pinned) + "\n")
    # The project and its workspace packages, from this source: each installed once, with every extra asked for.
    members = {p["name"]: p["source"]["editable"] for p in lock["package"] if "editable" in p.get("source", {})}
    project = tomllib.loads((source / "pyproject.toml").read_text())["project"]
    extras = {name: set() for name in members}
    extras[project["name"]] |= set(project.get("optional-dependencies", {})) - suite.extras_left_out
    others = []
    for line in tomllib.loads((source / "pyproject.toml").read_text())["dependency-groups"]["dev"]:
        requirement = Requirement(line)
        if requirement.name in NOT_FOR_TESTS or requirement.name in suite.not_served:
            continue
        if requirement.name in members:
            extras[requirement.name] |= requirement.extras - suite.extras_left_out
        else:
            others.append(line)
    needed = needed_members(lock, project["name"], members) - set(suite.not_served)
    editable = [part for name, path in members.items() if name in needed
                for part in ("-e", f"{path}[{','.join(sorted(extras[name]))}]" if extras[name] else path)]
    python = work / "venv" / "bin" / "python"
    run(sys.executable, "-m", "venv", work / "venv")
    pip = (python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", work / "constraints.txt")
    run(*pip, *editable, *others, *suite.test_imports, "pytest-xdist", cwd=source)
    run(*pip, "-e", CHECKOUT, "opentelemetry-sdk", cwd=source)
    return python


def needed_members(lock: dict, root: str, members: dict[str, str]) -> set[str]:
    """The workspace packages the project needs, itself included (from the lock: its dependencies, extras and
    dev group, and theirs)."""
    entries = {p["name"]: p for p in lock["package"] if p["name"] in members}
    needed, todo = set(), [root]
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        entry = entries[name]
        groups = [entry.get("dependencies", []), *entry.get("optional-dependencies", {}).values(),
                  entry.get("dev-dependencies", {}).get("dev", [])]
        todo += [d["name"] for group in groups for d in group if d["name"] in members]
    return needed


def outcomes_of(python: Path, source: Path, work: Path, suite: Suite, mode: str, tests: list[str]) -> dict[str, str]:
    """Each test's outcome (passed | failed | skipped) under `mode`."""
    results = work / f"results-{mode}.jsonl"
    results.unlink(missing_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(HERE),
        "OTEL_MCP_SUITE_MODE": mode,
        "OTEL_MCP_SUITE_RESULTS": str(results),
        "OTEL_MCP_SUITE_FAULTS": str(work / "faults.log"),
    }
    selection = tests or list(suite.selection)
    command = [python, "-m", "pytest", "-p", "otel_session", "-p", "no:cacheprovider", "-n", "2",
               "-q", "--color=no", "--no-header", "-o", "log_cli=false", *suite.options, *selection]
    shown = f"{len(tests)} tests" if tests else " ".join(suite.selection) or "all"
    print("+", " ".join(map(str, command[:-len(selection) or None])), f"({shown}, OTEL_MCP_SUITE_MODE={mode})",
          flush=True)
    completed = subprocess.run([str(part) for part in command], cwd=source, env=env, timeout=SUITE_SECONDS,
                               capture_output=True, text=True)
    outcomes: dict[str, str] = {}
    for line in results.read_text().splitlines() if results.exists() else []:
        nodeid, outcome = json.loads(line)
        if outcomes.get(nodeid) != "failed":  # a failure in any phase fails the test
            outcomes[nodeid] = outcome
    if not outcomes:
        raise SystemExit(f"no test ran under {mode}:\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}")
    tally = {kind: sum(outcome == kind for outcome in outcomes.values()) for kind in ("passed", "failed", "skipped")}
    print(f"  under {mode}: " + ", ".join(f"{kind} {count}" for kind, count in tally.items()), flush=True)
    return outcomes


def failing(outcomes: dict[str, str]) -> list[str]:
    return sorted(test for test, outcome in outcomes.items() if outcome == "failed")


def main(project: str, version: str, work: Path) -> int:
    suite = suite_of(project, version)
    work.mkdir(parents=True, exist_ok=True)
    source = unpack(project, version, work)
    python = install(source, work, suite)
    (work / "faults.log").write_text("")

    def outcomes(mode: str, tests: list[str]) -> dict[str, str]:
        return outcomes_of(python, source, work, suite, mode, tests)

    plugin = outcomes(suite.mode, [])
    off = outcomes("off", failing(plugin)) if failing(plugin) else {}
    changed = [t for t in failing(plugin) if off.get(t) == "passed"]
    known = {t: cause for t in changed for cause, prefixes in suite.known.items() if t.startswith(prefixes)}
    candidates = [t for t in changed if t not in known]
    if candidates:  # confirm: fails again with the plugin, passes again without, and not for tracing alone
        again = failing(outcomes(suite.mode, candidates))
        passes = outcomes("off", candidates)
        # A suite with a global provider of its own is its own tracing control: a global one set before it
        # would displace it.
        tracing = outcomes("tracing", candidates) if suite.mode == "plugin" else passes
        candidates = [t for t in again if passes.get(t) == "passed" and tracing.get(t) == "passed"]
    faults = (work / "faults.log").read_text().splitlines()
    ran = sum(outcome != "skipped" for outcome in plugin.values())
    uncollected = sorted(t for t in {**off, **plugin} if t.endswith(".py") and "failed" in (off.get(t), plugin.get(t)))
    by_cause = {cause: sum(1 for c in known.values() if c == cause) for cause in suite.known}
    print(f"{project} {version}'s own suite: {ran} tests ran with the plugin; {len(failing(plugin))} failed, "
          f"{len(failing(off))} of them without it too; {len(known)} by known causes; "
          f"{len(candidates)} changed by the plugin; {len(faults)} fault lines; "
          f"{len(uncollected)} test files not collected")
    for cause, count in by_cause.items():
        if count:
            print(f"  {count} because {cause}")
    for test in candidates:
        print(f"CHANGED BY THE PLUGIN: {test}")
    for fault in faults:
        print(f"PLUGIN FAULT: {fault}")
    for name, why in suite.not_served.items():
        print(f"LEFT OUT: {name}, not served here ({why}); test files that import it are not collected")
    for module in uncollected:
        print(f"NOT COLLECTED (a dependency is missing here): {module}")
    return 1 if candidates or faults or (uncollected and not suite.not_served) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]).resolve()))
