"""The hot-path benchmark works on this mcp line: every mode runs, no span is dropped, a row is reported.
It measures nothing here (CI is no bench)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HOT_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "hot_path.py"


def test_the_hot_path_benchmark_runs_every_mode_in_smoke_mode() -> None:
    done = subprocess.run([sys.executable, str(HOT_PATH), "--smoke"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    n, ratio = r"-?\d+", r"-?\d+\.\d\d"
    row = (rf"^\| [\d.]+ \| this checkout \| {n} \| {n} \| {n} \| {n} \| {ratio} \| {n} \| {ratio} \| {n} \| {ratio} "
           rf"\| {n} \| {ratio} \|$")
    assert re.search(row, done.stdout, re.MULTILINE), done.stdout


def test_the_hot_path_benchmark_measures_calls_in_flight_in_smoke_mode() -> None:
    command = [sys.executable, str(HOT_PATH), "--in-flight", "1,4", "--smoke"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    n, ratio = r"-?\d+", r"-?\d+\.\d\d"
    for level in (1, 4):
        assert re.search(rf"^\| [\d.]+ \| {level} \| {n} \| {n} \| {ratio} \|$", done.stdout, re.MULTILINE), done.stdout


@pytest.mark.long
@pytest.mark.timeout(1500)
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind counts the instructions")
@pytest.mark.skipif(importlib.util.find_spec("fastmcp") is not None, reason="once per SDK line is enough")
def test_the_hot_path_benchmark_counts_instructions_in_smoke_mode() -> None:
    command = [sys.executable, str(HOT_PATH), "--instructions", "--smoke"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    m, ratio = r"-?\d+\.\d{3}", r"-?\d+\.\d\d"
    row = rf"^\| [\d.]+ \| this checkout \| {m} \| {m} \| {m} \| {m} \| {ratio} \| {m} \| {ratio} \| {m} \| {ratio} \|$"
    assert re.search(row, done.stdout, re.MULTILINE), done.stdout
