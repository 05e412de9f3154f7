"""The benchmark works: every set-up runs and reports. It measures nothing here (CI is no bench)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench.py"


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
