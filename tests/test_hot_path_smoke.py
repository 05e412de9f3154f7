"""The hot-path benchmark works on this mcp line: every mode runs, no span is dropped, a row is reported,
and every other instrumentation of MCP is either measured beside the plugin or named with why it was not.
It measures nothing here (CI is no bench)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.peers import PEERS

HOT_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "hot_path.py"
# Set (comma-separated peer names) where CI installs the other instrumentations: those must be measured.
PEERS_REQUIRED = "HOT_PATH_PEERS_REQUIRED"


def assert_every_peer_reported(stdout: str, number: str, timed: bool) -> None:
    """The peers' table has the plugin's and the floor's rows (with the spans each made per call, when timed),
    and each peer a row or a line naming it and why it did not run; those CI installs have rows."""
    spans = r"\d+\.\d" if timed else ""

    def row(name: str) -> str:
        return rf"^\| {re.escape(name)} \| {number} \| -?\d+\.\d\d \| -?\d+\.\d\d \| {spans} \| .+ \|$"

    assert re.search(row("otel-mcp-cancel"), stdout, re.MULTILINE), stdout
    assert re.search(row("floor in place, propagated"), stdout, re.MULTILINE), stdout
    required = set(filter(None, os.environ.get(PEERS_REQUIRED, "").split(",")))
    for peer in PEERS:
        measured = re.search(row(peer.name), stdout, re.MULTILINE) is not None
        skipped = re.search(rf"^not run: {re.escape(peer.name)} \(.+\)$", stdout, re.MULTILINE) is not None
        assert measured != skipped, (peer.name, stdout)
        assert measured or peer.name not in required, (peer.name, stdout)
    if importlib.metadata.version("mcp").startswith("2."):  # the SDK's own spans are always there to measure
        assert re.search(row("mcp's own spans"), stdout, re.MULTILINE), stdout


NUMBER, RATIO, MILLIONS = r"-?\d+", r"-?\d+\.\d\d", r"-?\d+\.\d{3}"


def run_smoke(*options: str, timeout: int = 600) -> str:
    """What the benchmark prints in smoke mode with these options; it must exit cleanly."""
    command = [sys.executable, str(HOT_PATH), *options, "--smoke"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_hot_path_benchmark_runs_every_mode_in_smoke_mode() -> None:
    stdout = run_smoke()
    n, ratio = NUMBER, RATIO
    row = (rf"^\| [\d.]+ \| this checkout \| {n} \| {n} \| {n} \| {n} \| {ratio} \| {n} \| {ratio} \| {n} \| {ratio} "
           rf"\({ratio}–{ratio}\) \| {n} \| {ratio} \|$")
    assert re.search(row, stdout, re.MULTILINE), stdout
    each_round = rf"^adds / in place, propagated, each round \(this checkout\): {ratio}$"
    assert re.search(each_round, stdout, re.MULTILINE), stdout
    assert_every_peer_reported(stdout, n, timed=True)


def test_the_hot_path_benchmark_measures_the_goal_alone_in_smoke_mode() -> None:
    stdout = run_smoke("--goal")
    n, ratio = NUMBER, RATIO
    row = rf"^\| [\d.]+ \| this checkout \| {n} \| {n} \| {n} \| {ratio} \({ratio}–{ratio}\) \| {ratio} \|$"
    assert re.search(row, stdout, re.MULTILINE), stdout


def test_the_hot_path_benchmark_measures_calls_in_flight_in_smoke_mode() -> None:
    stdout = run_smoke("--in-flight", "1,4")
    for level in (1, 4):
        assert re.search(rf"^\| [\d.]+ \| {level} \| {NUMBER} \| {NUMBER} \| {RATIO} \|$", stdout, re.MULTILINE), stdout


def test_the_hot_path_benchmark_counts_bytecodes_by_package_in_smoke_mode() -> None:
    stdout = run_smoke("--opcodes")
    count = r"[\d,]+"
    plugin = re.search(rf"^\| the plugin \| 0 \| ({count}) \| 0 \| \+({count}) \| \+0 \|$", stdout, re.MULTILINE)
    assert plugin is not None, stdout  # the plugin's code runs with the plugin on, and only then
    assert plugin.group(1) == plugin.group(2) and int(plugin.group(1).replace(",", "")) > 0, stdout
    assert re.search(rf"^\| all \| {count} \| {count} \| {count} \| [+-]{count} \| [+-]{count} \|$", stdout,
                     re.MULTILINE), stdout


@pytest.mark.long
@pytest.mark.timeout(2400)
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind counts the instructions")
@pytest.mark.skipif(importlib.util.find_spec("fastmcp") is not None, reason="once per SDK line is enough")
def test_the_hot_path_benchmark_counts_instructions_in_smoke_mode() -> None:
    stdout = run_smoke("--instructions", timeout=1200)
    m, ratio = MILLIONS, RATIO
    row = rf"^\| [\d.]+ \| this checkout \| {m} \| {m} \| {m} \| {m} \| {ratio} \| {m} \| {ratio} \| {m} \| {ratio} \|$"
    assert re.search(row, stdout, re.MULTILINE), stdout
    assert_every_peer_reported(stdout, m, timed=False)
    # And what the simulated caches and branch predictor make of them: a row for each event.
    stdout = run_smoke("--instructions", "--caches", timeout=1000)
    n = r"-?[\d,]+"
    for event in ("instructions", "I1 misses", "D1 misses", "LL misses", "mispredicts"):
        row = rf"^\| [\d.]+ \| {event} \| {n} \| {n} \| {n} \| {ratio} \|$"
        assert re.search(row, stdout, re.MULTILINE), stdout
    # And the count with calls in flight.
    stdout = run_smoke("--instructions", "--in-flight", "1,4", timeout=1000)
    for level in (1, 4):
        assert re.search(rf"^\| [\d.]+ \| {level} \| {m} \| {m} \| {ratio} \|$", stdout, re.MULTILINE), stdout
