"""The hot-path benchmark works on this mcp line: every mode runs, no span is dropped, a row is reported.
It measures nothing here (CI is no bench)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

HOT_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "hot_path.py"


def test_the_hot_path_benchmark_runs_every_mode_in_smoke_mode() -> None:
    done = subprocess.run([sys.executable, str(HOT_PATH), "--smoke"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    n, ratio = r"-?\d+", r"-?\d+\.\d\d"
    row = rf"^\| [\d.]+ \| this checkout \| {n} \| {n} \| {n} \| {n} \| {ratio} \| {n} \| {ratio} \|$"
    assert re.search(row, done.stdout, re.MULTILINE), done.stdout
