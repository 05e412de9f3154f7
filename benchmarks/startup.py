"""What the plugin adds to a server's start-up: a server spawned per call (as langchain-mcp-adapters does by default)
pays it on every call.

    python benchmarks/startup.py                 # spawn -> first initialize answer over stdio, 20 rounds per mode
    python benchmarks/startup.py --rounds 40     # more rounds
    python benchmarks/startup.py --smoke         # 2 rounds: checks that it works, measures nothing

Each server installed is measured: the SDK's own (benchmarks/startup_server.py: FastMCP on mcp 1.x, MCPServer on
2.x) and, where it is installed, standalone FastMCP's (the same server on `fastmcp.FastMCP`). Three modes, each a
fresh process of the same stdio server, exporters off so that no export is timed:
- `plain`: `python startup_server.py`;
- `sdk`: `opentelemetry-instrument python startup_server.py` with this plugin disabled
  (`OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=mcp_cancel`): the distro, the SDK and any other instrumentation;
- `plugin`: the same with the plugin on.
Rounds interleave the modes (their order turned each round), after a warm-up that writes the bytecode caches a
user's install has. The plugin's share is `plugin - sdk`, paired round by round, of the wall time and of the
server process's CPU time (less noisy on a shared machine): its median and a bootstrap 95% interval.

Then, for each server, in one more process under `opentelemetry-instrument` with the plugin disabled (so the
distro's own imports are done, as when it loads the plugin) that has imported what the server imports, where the
plugin's share goes: importing `otel_mcp_cancel`, its `instrument()`, and the modules they import that the server
would not, by package (`-X importtime`, self times). A FastMCP server that never calls out imports no FastMCP
client: the plugin's hooks for it wait for that import.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVER = HERE / "startup_server.py"
MODES = ("plain", "sdk", "plugin")
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "startup", "version": "0"}}}
# Where the plugin's own load begins and ends in the breakdown's import log.
BEGIN, END = "== plugin load begins", "== plugin load ends"
# The server's own imports first (what it would import anyway), then the plugin's load.
BREAKDOWN = f"""
import sys, time
sys.path.insert(0, {str(HERE)!r})
import startup_server
sys.stderr.write({BEGIN!r} + "\\n")
started = time.perf_counter()
from otel_mcp_cancel import McpCancelInstrumentor
imported = time.perf_counter()
McpCancelInstrumentor().instrument()
done = time.perf_counter()
sys.stderr.write({END!r} + "\\n")
print(f"{{1000 * (imported - started):.1f}} {{1000 * (done - imported):.1f}}")
"""


def environment(mode: str, framework: str) -> dict[str, str]:
    # Bytecode caches written, as a user's install has them (pip compiles what it installs; an editable checkout
    # compiles on the first run, which the warm-up makes), so that no mode's time is spent compiling.
    settings = {name: value for name, value in os.environ.items()
                if not name.startswith("OTEL_") and name != "PYTHONDONTWRITEBYTECODE"}
    settings.update(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none",
                    STARTUP_FRAMEWORK=framework)
    if mode == "sdk":
        settings["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "mcp_cancel"
    return settings


def command(mode: str, *program: str) -> list[str]:
    instrument = str(Path(sys.executable).with_name("opentelemetry-instrument"))
    return [*(() if mode == "plain" else (instrument,)), sys.executable, *program]


def spawn_to_initialized(mode: str, framework: str) -> tuple[float, float]:
    """Milliseconds from spawning the server to reading its answer to `initialize`, and the CPU time the server's
    process spent in all (its start-up, that answer and its exit once its stdin closed)."""
    started = time.perf_counter()
    process = subprocess.Popen(command(mode, str(SERVER)), env=environment(mode, framework), stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        process.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        process.stdin.flush()
        answer = json.loads(process.stdout.readline())
        elapsed = time.perf_counter() - started
        assert answer.get("id") == 1 and "result" in answer, answer
    finally:
        process.stdin.close()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return 1000 * elapsed, 1000 * (usage.ru_utime + usage.ru_stime)


def interval(differences: list[float], draws: int = 2000) -> tuple[float, float]:
    """A bootstrap 95% interval of the median of `differences`."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(differences, k=len(differences))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def breakdown(framework: str) -> tuple[float, float, dict[str, float], dict[str, int]]:
    """(import ms, instrument() ms, self ms by module or package, modules by package) of the plugin's load."""
    done = subprocess.run(command("sdk", "-X", "importtime", "-c", BREAKDOWN), env=environment("sdk", framework),
                          capture_output=True, text=True, timeout=120, check=True)
    imported, instrumented = map(float, done.stdout.split())
    log = done.stderr.split(BEGIN, 1)[1].split(END, 1)[0]
    by_module: dict[str, float] = defaultdict(float)
    modules: dict[str, int] = defaultdict(int)
    for match in re.finditer(r"^import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)$", log, re.MULTILINE):
        name = match.group(2)
        key = name if name.startswith("otel_mcp_cancel") else name.split(".")[0]
        by_module[key] += int(match.group(1)) / 1000
        modules[name.split(".")[0]] += 1
    return imported, instrumented, dict(by_module), dict(modules)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="2 rounds: checks that it works, measures nothing")
    options = parser.parse_args()
    rounds = 2 if options.smoke else options.rounds

    import importlib.metadata
    import importlib.util

    print(f"mcp {importlib.metadata.version('mcp')}, Python {sys.version.split()[0]}, "
          f"opentelemetry-sdk {importlib.metadata.version('opentelemetry-sdk')}; {rounds} rounds")
    frameworks = ["sdk", *(["fastmcp"] if importlib.util.find_spec("fastmcp") is not None else [])]
    for framework in frameworks:
        print(f"\n## {'the SDK' if framework == 'sdk' else 'standalone FastMCP'}'s server"
              + (f" ({fastmcp_distribution()})" if framework == "fastmcp" else ""))
        measure(framework, rounds)


def fastmcp_distribution() -> str:
    """What provides FastMCP here: `fastmcp` (4.x: a meta-package over `fastmcp-slim`) or `fastmcp-slim` alone."""
    import importlib.metadata

    for name in ("fastmcp", "fastmcp-slim"):
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "fastmcp"


def measure(framework: str, rounds: int) -> None:
    for mode in MODES:  # a warm-up: bytecode caches written
        spawn_to_initialized(mode, framework)
    wall: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
    for round_number in range(rounds):
        for mode in MODES[round_number % 3:] + MODES[:round_number % 3]:
            elapsed, spent = spawn_to_initialized(mode, framework)
            wall[mode].append(elapsed)
            cpu[mode].append(spent)
    print("\nspawn to the first initialize answer over stdio (wall), and the server process's CPU time, ms "
          "(medians of the rounds)\n")
    print("| mode | wall | CPU |\n|---|---|---|")
    for mode in MODES:
        print(f"| {mode} | {statistics.median(wall[mode]):.0f} | {statistics.median(cpu[mode]):.0f} |")
    for name, times in (("wall", wall), ("CPU", cpu)):
        shares = [plugin - sdk for plugin, sdk in zip(times["plugin"], times["sdk"])]
        low, high = interval(shares)
        print(f"the plugin's share of the {name} time (plugin - sdk, paired by round): "
              f"{statistics.median(shares):.1f} ms (95% interval {low:.1f} to {high:.1f})")

    imported, instrumented, by_module, modules = breakdown(framework)
    print(f"\nwhere it goes, in one process: import otel_mcp_cancel {imported:.1f} ms, instrument() "
          f"{instrumented:.1f} ms; the modules they import, by package: "
          + ", ".join(f"{package} {count}" for package, count in sorted(modules.items(), key=lambda kv: -kv[1])))
    print("\n| module or package | self ms |\n|---|---|")
    for name, spent in sorted(by_module.items(), key=lambda kv: -kv[1])[:15]:
        print(f"| {name} | {spent:.1f} |")


if __name__ == "__main__":
    main()
