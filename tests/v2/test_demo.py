"""The README's demo runs end to end and its tables agree with themselves."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEMO = EXAMPLES / "traffic.py"


def test_demo_prints_every_outcome_and_the_ghosts_it_saw() -> None:
    done = subprocess.run([sys.executable, str(DEMO)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    table = out.split("tools/call by tool and outcome")[1].split("ghost responses")[0]
    rows = {line.split()[0]: [int(n) for n in line.split()[1:]] for line in table.splitlines()[2:] if line.strip()}
    # Outcomes that do not depend on timing.
    assert rows["export_vault"] == [0, 1, 0]
    assert rows["lint_note"] == [0, 1, 0]
    assert rows["delete_everything"] == [0, 1, 0]
    assert rows["read_note"] == [1, 1, 0]
    assert sum(n for tool in rows.values() for n in tool[2:]) >= 2  # the timed-out and caller-cancelled searches
    ghost_section = out.split("ghost responses")[1].split("the vault after the run")[0]
    listed = re.findall(r"request \d+", ghost_section)
    counted = int(re.search(r"ghost_responses counter: (\d+)", ghost_section).group(1))
    assert counted == len(listed)
    assert "MISSING" not in out
    warnings = out.split("the WARNING lines in the server's log")[1]
    assert warnings.count("mcp.ghost_response.suppressed_after_cancel_ack") == counted


def test_the_trace_picture_is_drawn_from_exported_spans(tmp_path: Path) -> None:
    picture = tmp_path / "trace.svg"
    done = subprocess.run([sys.executable, str(EXAMPLES / "draw_trace.py"), str(picture)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    drawing = picture.read_text()
    assert drawing.startswith("<svg") and drawing.count("tools/call append_journal") == 2
