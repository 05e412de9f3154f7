"""Run the MCP SDK's own test suite without and with otel-mcp-cancel, and fail on any difference we caused.

    python .ci/sdk-suite/run.py 2.3.0 WORKDIR    (a Python with `packaging`, e.g. a venv of .ci/run)

From the sdist of mcp==VERSION (its tests ship in it): tag it as its release (the build reads the version from
git), install it with its test dependencies pinned from the `uv.lock` inside it, and this checkout. Then run
the suite with OTEL_MCP_SUITE_MODE=off and =plugin (see otel_session.py). A test that passed without the plugin
and failed with it, twice, is ours unless it also fails with tracing on and no plugin (a plain global
TracerProvider: mcp 2.x then puts `traceparent` into `_meta` itself) or inspects the SDK's own spans, which
ours replace (OWN_SPAN_FILES). Any fault line the plugin logged fails the run too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import tomllib
from packaging.markers import Marker

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent.parent
# Tests that look at the SDK's own OpenTelemetryMiddleware / "MCP send" spans: ours take their place.
OWN_SPAN_FILES = ("tests/server/test_otel.py", "tests/shared/test_otel.py", "tests/docs_src/test_opentelemetry.py")
# Development tools the tests do not run (and a git-only source no registry here serves).
NOT_FOR_TESTS = {"pyright", "ruff", "strict-no-cover"}
# The docs toolchain's own tests (2.x) need the docs dependency group: nothing of the SDK's runtime is there.
NOT_THE_SDK = ("tests/docs",)
# Imported by the tests but named in no dependency group of 1.x (uv brings it in through the lock).
TEST_IMPORTS = ["requests"]
# Tests that assert the exact `params` a client puts on the wire. With tracing on, the W3C trace context
# rides in `params._meta`: mcp 2.x puts it there itself (its such tests fail with tracing alone), and on
# 1.x the plugin does the same, for requests without params too. By design, not a change to the host.
TRACE_CONTEXT_ON_THE_WIRE = (
    "tests/client/test_session.py::test_client_tool_call_with_meta[meta1]",
    "tests/client/test_list_methods_cursor.py::test_list_methods_cursor_parameter[",
    "tests/client/test_list_methods_cursor.py::test_list_methods_params_parameter[",
)
SUITE_SECONDS = 30 * 60


def run(*command: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    print("+", " ".join(map(str, command)), flush=True)
    subprocess.run([str(part) for part in command], cwd=cwd, env=env, check=True)


def unpack(version: str, work: Path) -> Path:
    run(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
        f"mcp=={version}", "-d", work)
    with tarfile.open(work / f"mcp-{version}.tar.gz") as sdist:
        sdist.extractall(work, filter="data")
    source = work / f"mcp-{version}"
    git = ("git", "-c", "user.name=ci", "-c", "user.email=ci@localhost")
    run(*git, "init", "-q", cwd=source)
    run(*git, "add", "-A", cwd=source)
    run(*git, "commit", "-q", "-m", f"mcp {version} sdist", cwd=source)
    run(*git, "tag", f"v{version}", cwd=source)
    return source


def install(source: Path, work: Path) -> Path:
    lock = tomllib.loads((source / "uv.lock").read_text())
    pinned = [f"{p['name']}=={p['version']}" for p in lock["package"] if "registry" in p.get("source", {})
              and any(Marker(m).evaluate() for m in p.get("resolution-markers", ["python_version >= '3'"]))]
    (work / "constraints.txt").write_text("\n".join(pinned) + "\n")
    members = {p["name"]: p["source"]["editable"] for p in lock["package"] if "editable" in p.get("source", {})}
    project = tomllib.loads((source / "pyproject.toml").read_text())
    requirements = ["-e", f".[{','.join(project['project'].get('optional-dependencies', {}))}]"]
    if "mcp-types" in members:  # mcp 2.x keeps its wire types in a workspace package of the same release
        requirements += ["-e", members["mcp-types"]]
    for requirement in project["dependency-groups"]["dev"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
        if name in NOT_FOR_TESTS or name == "mcp":
            continue
        requirements += ["-e", members[name]] if name in members else [requirement]
    python = work / "venv" / "bin" / "python"
    run(sys.executable, "-m", "venv", work / "venv")
    pip = (python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", work / "constraints.txt")
    run(*pip, *requirements, *TEST_IMPORTS, "pytest-xdist", cwd=source)
    run(*pip, "-e", CHECKOUT, "opentelemetry-sdk", cwd=source)
    return python


def suite(python: Path, source: Path, work: Path, mode: str, tests: list[str]) -> dict[str, str]:
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
    ignored = [f"--ignore={path}" for path in NOT_THE_SDK if (source / path).exists()]
    command = [python, "-m", "pytest", "-p", "otel_session", "-p", "no:cacheprovider", "-n", "2",
               "-q", "--color=no", "--no-header", "-o", "log_cli=false", *ignored, *tests]
    print("+", " ".join(map(str, command[:-len(tests) or None])), f"({len(tests) or 'all'} tests,",
          f"OTEL_MCP_SUITE_MODE={mode})", flush=True)
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


def main(version: str, work: Path) -> int:
    work.mkdir(parents=True, exist_ok=True)
    source = unpack(version, work)
    python = install(source, work)
    (work / "faults.log").write_text("")
    off = suite(python, source, work, "off", [])
    plugin = suite(python, source, work, "plugin", [])
    by_design = OWN_SPAN_FILES + TRACE_CONTEXT_ON_THE_WIRE
    candidates = [t for t in failing(plugin) if off.get(t) == "passed" and not t.startswith(by_design)]
    if candidates:  # confirm: fails again with the plugin, passes again without, and not for tracing alone
        again = failing(suite(python, source, work, "plugin", candidates))
        passes = suite(python, source, work, "off", candidates)
        tracing = suite(python, source, work, "tracing", candidates)
        candidates = [t for t in again if passes.get(t) == "passed" and tracing.get(t) == "passed"]
    faults = (work / "faults.log").read_text().splitlines()
    ran = sum(outcome != "skipped" for outcome in plugin.values())
    own = sum(1 for t in failing(plugin) if t.startswith(OWN_SPAN_FILES) and off.get(t) == "passed")
    wire = sum(1 for t in failing(plugin) if t.startswith(TRACE_CONTEXT_ON_THE_WIRE) and off.get(t) == "passed")
    uncollected = sorted(t for t in {**off, **plugin} if t.endswith(".py") and "failed" in (off.get(t), plugin.get(t)))
    print(f"mcp {version}'s own suite: {ran} tests ran with the plugin; {len(failing(off))} fail without it, "
          f"{len(failing(plugin))} with it ({own} inspect the SDK's own spans, {wire} the trace context in "
          f"`_meta`); {len(candidates)} changed by the plugin; {len(faults)} fault lines; "
          f"{len(uncollected)} test files not collected")
    for test in candidates:
        print(f"CHANGED BY THE PLUGIN: {test}")
    for fault in faults:
        print(f"PLUGIN FAULT: {fault}")
    for module in uncollected:
        print(f"NOT COLLECTED (a dependency is missing here): {module}")
    return 1 if candidates or faults or uncollected else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], Path(sys.argv[2]).resolve()))
