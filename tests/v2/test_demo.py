"""The README's demo runs end to end and its tables agree with themselves."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from examples.otlp_sink import OtlpSink

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEMO = EXAMPLES / "traffic.py"
SCOPE = "otel_mcp_cancel"


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
    # Both ends of every call in one trace; each ghost's WARNING exported as a log record tied to its span.
    joined, calls = map(int, re.search(r"one trace per call: (\d+) of (\d+)", out).groups())
    assert joined == calls == sum(map(sum, rows.values()))
    warnings = out.split("the ghost WARNING as OTLP log records")[1]
    assert warnings.count("= the ghost span") == counted and "NOT a ghost span" not in warnings


def test_the_trace_picture_is_drawn_from_exported_spans(tmp_path: Path) -> None:
    picture = tmp_path / "trace.svg"
    done = subprocess.run([sys.executable, str(EXAMPLES / "draw_trace.py"), str(picture)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    drawing = picture.read_text()
    assert drawing.startswith("<svg") and drawing.count("tools/call append_journal") == 2


def test_the_demo_drives_any_otlp_endpoint_with_the_users_settings() -> None:
    """Pointed at an endpoint of yours, the demo's server and client both export there, and your OTEL_*
    settings (a trace-only backend's, this plugin's own options) reach the server."""
    sink = OtlpSink().start()
    try:
        environment = {
            **os.environ,
            "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint,
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_PYTHON_MCP_CANCEL_CANCELLED_SPAN_STATUS": "error",
        }
        done = subprocess.run([sys.executable, str(DEMO)], capture_output=True, text=True, timeout=300,
                              env=environment)
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"telemetry was exported to {sink.endpoint}" in done.stdout
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not [s for s in sink.server_spans(SCOPE) if s.name.startswith("tools/")]:
            time.sleep(0.1)
        calls = [s for s in sink.server_spans(SCOPE) if s.attributes.get("mcp.method.name") == "tools/call"]
        cancelled = [s for s in calls if s.attributes["tool.outcome"] == "cancelled"]
        assert cancelled and {s.status for s in cancelled} == {"ERROR"}  # the user's option reached the server
        client_spans = {s.span_id for s in sink.spans if s.kind == "CLIENT" and s.scope == SCOPE}
        assert all(s.parent_span_id in client_spans for s in calls)
        assert sink.points == [] and sink.logs == []
    finally:
        sink.stop()
