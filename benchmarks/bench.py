"""What each telemetry set-up costs a tools/call round trip, side by side in one run.

    python benchmarks/bench.py                       # memory streams and stdio on this mcp, 500 calls x 3
    python benchmarks/bench.py --mcp1-python PATH    # also stdio against an mcp 1.x server (that venv's python)
    python benchmarks/bench.py --smoke               # a few calls each: checks that it works, measures nothing

Each measurement runs in a fresh process (instrumentation is process-wide), repeats are interleaved
(a, b, c, a, b, c, ...) so drift on a shared machine hits every set-up alike, and ratios are taken
pair by pair within a repeat, then their median reported. Telemetry is exported over OTLP/HTTP to a
receiver in this process. Configurations whose packages are not installed are reported as such.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from configs import CONFIGS, NEEDS, apply  # noqa: E402

from examples.otlp_sink import OtlpSink  # noqa: E402

WARM_UP = 30


async def _timed_calls(client: Any, calls: int, concurrency: int) -> dict[str, Any]:
    import anyio

    latencies: list[float] = []

    async def worker(count: int) -> None:
        for _ in range(count):
            started = time.perf_counter()
            await client.call_tool("echo", {"text": "hello"})
            latencies.append(time.perf_counter() - started)

    for _ in range(WARM_UP):
        await client.call_tool("echo", {"text": "warm"})
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for n in range(concurrency):
            tg.start_soon(worker, calls // concurrency + (1 if n < calls % concurrency else 0))
    return {"latencies": latencies, "wall": time.perf_counter() - started}


async def _child_memory(config: str, calls: int, concurrency: int, endpoint: str) -> dict[str, Any]:
    apply(config, endpoint)
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bench")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    async with Client(server, mode="legacy") as client:
        return await _timed_calls(client, calls, concurrency)


async def _child_stdio(config: str, calls: int, endpoint: str, server_python: str) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=server_python, args=[str(HERE / "bench_server.py"), config, endpoint])
    async with Client(stdio_client(params), mode="legacy") as client:
        return await _timed_calls(client, calls, 1)


def _missing(python: str, config: str) -> str | None:
    """Why `python` cannot run this set-up, or None if it can."""
    module = NEEDS.get(config)
    if module is None:
        return None
    check = f"import importlib.util as u; raise SystemExit(u.find_spec({module!r}.split('.')[0]) is None)"
    found = subprocess.run([python, "-c", check], capture_output=True, timeout=120).returncode == 0
    return None if found else f"{module} is not installed for {python}"


def _run_child(python: str, *args: str) -> dict[str, Any]:
    done = subprocess.run([python, __file__, "--child", *args], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        reasons = [line.strip() for line in done.stderr.splitlines() if "Error" in line or "Exception" in line]
        return {"error": (reasons or ["failed"])[-1].replace("|", "/").strip(" /")[:160]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    latencies = sorted(x for run in runs for x in run["latencies"])
    return {
        "median_ms": 1000 * statistics.median(latencies),
        "p95_ms": 1000 * latencies[int(0.95 * (len(latencies) - 1))],
        "calls_per_s": sum(len(run["latencies"]) for run in runs) / sum(run["wall"] for run in runs),
    }


def _pairwise(runs: dict[str, list[dict[str, Any]]], config: str, baseline: str) -> float | None:
    """The median over repeats of (config's median latency / baseline's) within the same repeat."""
    if baseline not in runs or config not in runs:
        return None
    ratios = [
        statistics.median(ours["latencies"]) / statistics.median(theirs["latencies"])
        for ours, theirs in zip(runs[config], runs[baseline])
    ]
    return statistics.median(ratios)


def measure(name: str, configs: list[str], repeats: int, child_args: Any, server_python: str) -> list[str]:
    runs: dict[str, list[dict[str, Any]]] = {}
    missing = {config: why for config in configs if (why := _missing(server_python, config)) is not None}
    for _ in range(repeats):
        for config in configs:
            if config in missing:
                continue
            result = _run_child(*child_args(config))
            if "error" in result:
                missing[config] = result["error"]
            else:
                runs.setdefault(config, []).append(result)
    rows = []
    for config in configs:
        if config in missing:
            rows.append(f"| {name} | {CONFIGS[config]} | not measured: {missing[config]} | | | | |")
            continue
        s = _summary(runs[config])
        vs_none, vs_sdk = _pairwise(runs, config, "none"), _pairwise(runs, config, "sdk")
        rows.append(
            f"| {name} | {CONFIGS[config]} | {s['median_ms']:.3f} | {s['p95_ms']:.3f} | {s['calls_per_s']:.0f} | "
            f"{'' if vs_none is None else f'{vs_none:.3f}'} | {'' if vs_sdk is None else f'{vs_sdk:.3f}'} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", default="1,100,1000", help="in-flight calls to compare, memory streams")
    parser.add_argument("--python", default=sys.executable, help="python to measure with (a venv with mcp 2.x)")
    parser.add_argument("--mcp1-python", help="python of a venv with mcp 1.x and otel-mcp-cancel")
    parser.add_argument("--smoke", action="store_true", help="a few calls each, to check the benchmark works")
    options = parser.parse_args()
    calls, repeats = (20, 1) if options.smoke else (options.calls, options.repeats)
    levels = [1, 10] if options.smoke else [int(level) for level in options.concurrency.split(",")]
    python = options.python
    sink = OtlpSink(keep=False).start()
    configs = list(CONFIGS)
    header = [
        "| transport | set-up | median ms | p95 ms | calls/s | vs (a) | vs (b) |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = measure("memory, mcp 2.x", configs, repeats,
                   lambda c: (python, "memory", c, str(calls), "1", sink.endpoint), python)
    rows += measure("stdio, mcp 2.x", configs, repeats,
                    lambda c: (python, "stdio", c, str(calls), sink.endpoint, python), python)
    if options.mcp1_python:
        rows += measure("stdio, mcp 1.x", ["none", "sdk", "plugin", "plugin_spans"], repeats,
                        lambda c: (python, "stdio", c, str(calls), sink.endpoint, options.mcp1_python),
                        options.mcp1_python)
    print("\n".join(header + rows))

    print("\nper-call cost with many calls in flight (memory streams, mcp 2.x): wall time / calls")
    print("| in flight | (a) ms/call | (c) ms/call | (c) / (a) |\n|---|---|---|---|")
    for level in levels:
        per_call = {}
        for config in ("none", "plugin"):
            results = [_run_child(python, "memory", config, str(max(calls, level)), str(level), sink.endpoint)
                       for _ in range(repeats)]
            per_call[config] = statistics.median(1000 * r["wall"] / len(r["latencies"]) for r in results)
        print(f"| {level} | {per_call['none']:.3f} | {per_call['plugin']:.3f} | "
              f"{per_call['plugin'] / per_call['none']:.3f} |")
    sink.stop()


def child() -> None:
    import anyio

    mode, config, *rest = sys.argv[2:]
    if mode == "memory":
        calls, concurrency, endpoint = int(rest[0]), int(rest[1]), rest[2]
        result = anyio.run(_child_memory, config, calls, concurrency, endpoint)
    else:
        calls, endpoint, server_python = int(rest[0]), rest[1], rest[2]
        result = anyio.run(_child_stdio, config, calls, endpoint, server_python)
    print(json.dumps(result))


if __name__ == "__main__":
    child() if sys.argv[1:2] == ["--child"] else main()
