"""The benchmarks that need mcp 2.x's client work: every set-up runs and reports. They measure nothing here (CI is
no bench)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench.py"
LOAD = Path(__file__).resolve().parents[2] / "benchmarks" / "load.py"


@pytest.mark.long
@pytest.mark.timeout(900)
def test_the_benchmark_runs_every_set_up_in_smoke_mode() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--smoke"], capture_output=True, text=True, timeout=800)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| memory") or line.startswith("| stdio")]
    measured = [row for row in rows if re.search(r"\| \d+\.\d{3} \| \d+\.\d{3} \| \d+ \|", row)]
    for set_up in ("(a) no tracer provider", "(b) SDK providers", "(c) otel-mcp-cancel", "(c') otel-mcp-cancel"):
        assert sum(set_up in row for row in measured) == 2, set_up  # memory streams and stdio
    # The peer instrumentations are reported either way: measured, or why not.
    assert sum("(d)" in row for row in rows) == 4
    assert re.search(r"^\| 10 \| \d+\.\d{3} \| \d+\.\d{3} \| \d+\.\d{3} \|$", done.stdout, re.MULTILINE)


@pytest.mark.long
@pytest.mark.timeout(900)
def test_the_load_benchmark_runs_every_mode_and_counts_every_workers_calls_in_smoke_mode() -> None:
    """This line's server and, where CI gives one, an mcp 1.x environment's (MCP_PEER_PYTHON)."""
    peer = os.environ.get("MCP_PEER_PYTHON")
    mcp1 = ["--mcp1-python", peer] if peer else []
    done = subprocess.run([sys.executable, str(LOAD), "--smoke", *mcp1], capture_output=True, text=True, timeout=800)
    assert done.returncode == 0, done.stderr[-3000:]
    servers = [f"mcp {version('mcp')}", *(["mcp 1."] if peer else [])]
    for server in servers:
        for shape in ("stdio, 1 in flight", "stdio, 32 in flight", "http, 1 session(s)", "http, 32 session(s)"):
            for mode in ("plain", "sdk", "plugin", "floor"):
                assert re.search(rf"^\| {re.escape(server)}[\d.]* \| {re.escape(shape)} \| {mode} \| \d+ \| \d+ \| "
                                 r"\d+\.\d\d \| \d+\.\d\d \| \d+\.\d\d \| \d+\.\d\d \| \d+\.\d\d \|$",
                                 done.stdout, re.MULTILINE), (server, shape, mode, done.stdout)
        assert re.search(rf"^{re.escape(server)}[\d.]*: uvicorn --workers 2, 32 sessions: 40 calls in .*; delivered 40 "
                         r"spans and 40 duration points from 2 worker\(s\)$", done.stdout, re.MULTILINE), done.stdout


@pytest.mark.long
@pytest.mark.timeout(300)
def test_the_crossing_sweep_runs_both_revisions_and_finds_no_false_ghost_in_smoke_mode() -> None:
    crossings = Path(__file__).resolve().parents[2] / "benchmarks" / "crossings.py"
    done = subprocess.run([sys.executable, str(crossings), "--smoke"], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]  # 1 on a false ghost
    for revision in ("2026-07-28", "legacy"):
        assert re.search(rf"^{revision}: 5 calls, \d timed out, \d crossings; reported \d \(\d by the server, \d by "
                         r"the client\); false ghosts 0; ", done.stdout, re.MULTILINE), done.stdout
