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


def test_demo_prints_every_outcome_the_ghosts_and_a_retry_on_one_screen() -> None:
    done = subprocess.run([sys.executable, str(DEMO)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert len(out.strip().splitlines()) <= 30, out  # one screen
    table = out.split("tools/call by tool and outcome")[1].split("ghosts (")[0]
    rows = {line.split()[0]: [int(n) for n in line.split()[1:]] for line in table.splitlines()[2:] if line.strip()}
    # Outcomes that do not depend on timing.
    assert rows["export_vault"] == [0, 1, 0]
    assert rows["lint_note"] == [0, 1, 0]
    assert rows["delete_everything"] == [0, 1, 0]
    assert rows["read_note"] == [1, 1, 0]
    assert sum(n for tool in rows.values() for n in tool[2:]) >= 2  # the timed-out and caller-cancelled searches
    # Every ghost counted, logged as a WARNING tied to its span, its write on disk; its retry linked to it.
    ghosts = int(re.search(r"its answer was suppressed\): (\d+), by risk: ", out).group(1))
    counted, tied, warnings, greppable = map(int, re.search(
        r"ghost_responses counter: (\d+); WARNING log records tied to a ghost span: (\d+) of (\d+), "
        r"starting mcp\.ghost_response\.suppressed_after_cancel_ack: (\d+)", out).groups())
    assert ghosts == counted == tied == warnings == greppable >= 1
    assert "MISSING" not in out and re.search(r"on disk all the same: (\d+) of \1 notes", out)
    retries, retries_counted = map(int, re.search(r"and arguments\): (\d+), tool.ghost_retries counter: (\d+)",
                                                  out).groups())
    assert retries == retries_counted >= 1
    # Both ends of every call in one trace.
    joined, calls = map(int, re.search(r"one trace per call: (\d+) of (\d+)", out).groups())
    assert joined == calls == sum(map(sum, rows.values()))
    # The drawn trace: the ghost's server span under its cancelled client span, the retry linked to it.
    view = out.split("a ghost and its retry, as a trace view shows them")[1].strip("\n").splitlines()
    assert len(view) == 4, view
    timed_out = r"tool.outcome=cancelled, tool.cancel_reason=timeout, error.type=timeout$"
    assert re.match(r"  CLIENT tools/call (\w+): " + timed_out, view[0])
    ghost_span = re.search(r"tool.handler_outcome=ok, tool.ghost_risk=\w+ \(span (\w+)\)$", view[1]).group(1)
    assert view[3].endswith(f"tool.retried_ghost_risk={view[1].split('tool.ghost_risk=')[1].split()[0]}, "
                            f"linked to span {ghost_span}")


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
