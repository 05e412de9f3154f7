"""The start-up benchmark works on this mcp line: every mode starts a server that answers `initialize`, the
plugin's share and where it goes are reported, for the SDK's server and standalone FastMCP's. It measures nothing
here (CI is no bench); it does check that the plugin's load imports nothing the server itself does not, but the
plugin's own modules."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.frameworks import FASTMCP_MAJOR

STARTUP = Path(__file__).resolve().parents[1] / "benchmarks" / "startup.py"


@pytest.mark.timeout(300)  # beside FastMCP it starts twice as many servers, each a second or more on 2 busy cores
def test_the_startup_benchmark_runs_every_mode_in_smoke_mode() -> None:
    done = subprocess.run([sys.executable, str(STARTUP), "--smoke"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for mode in ("plain", "sdk", "plugin"):
        assert re.search(rf"^\| {mode} \| \d+ \| \d+ \|$", done.stdout, re.MULTILINE), done.stdout
    for time in ("wall", "CPU"):
        assert re.search(rf"^the plugin's share of the {time} time \(plugin - sdk, paired by round\): -?\d+\.\d ms "
                         r"\(95% interval -?\d+\.\d to -?\d+\.\d\)$", done.stdout, re.MULTILINE), done.stdout
    # Each server measured (the SDK's; standalone FastMCP's where it is installed): the plugin's load imports
    # nothing of the server's packages that the server did not (FastMCP's client among them).
    servers = re.findall(r"^## (.*)'s server", done.stdout, re.MULTILINE)
    assert servers == ["the SDK", *(["standalone FastMCP"] if FASTMCP_MAJOR is not None else [])], done.stdout
    imported = re.findall(r"the modules they import, by package: (.*)$", done.stdout, re.MULTILINE)
    assert len(imported) == len(servers), done.stdout
    assert all(re.fullmatch(r"otel_mcp_cancel \d+", packages) for packages in imported), done.stdout
