"""The plugin's telemetry as its users see it: calls with known outcomes go from a server under
`opentelemetry-instrument` through the shipped collector config into Arize Phoenix (the sampled traces, as a
user adds it beside Jaeger) and Prometheus (the collector's exporter, scraped by the shipped job, with the
shipped alert rules); then headless Chromium opens their own pages and the test reads what they show.

With OTEL_MCP_CANCEL_SCREENSHOTS=<folder> (examples/screenshots.py sets it) each view is also saved there as a
PNG: the pictures in README.md and docs/finding-it.md."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest
from mcp.client.stdio import StdioServerParameters, stdio_client

from examples.otlp_sink import exporter_environment
from tests.backends import eventually, running_collector, running_jaeger, running_phoenix
from tests.prometheus_server import Prometheus
from tests.raw_peer import RawPeer, raw_peer_over
from tests.subprocess_servers import ghost_then_retry, instrumented_command, require
from tests.test_pipelines import ALERTS, alert_queries, dashboard_queries, documented_query, values

# Phoenix migrates its database as it starts, and Chromium loads each page on a machine running two test
# environments at once: minutes.
pytestmark = [pytest.mark.anyio, pytest.mark.backends, pytest.mark.timeout(420)]

# The traffic, by tool and outcome: what every view must show.
CALLS = {
    ("echo", "ok"): 3,
    ("broken", "failed"): 1,
    ("hang", "cancelled"): 2,
    ("shielded_write", "cancelled"): 1,  # the ghost
    ("shielded_write", "ok"): 1,  # its retry
    ("wait_started", "ok"): 1,
    ("release", "ok"): 1,
}
CANCELLED = "attributes['tool']['outcome'] == 'cancelled'"  # Phoenix reads a dotted key as nested
GHOST = "attributes['tool']['ghost_risk'] == 'unsafe'"
RETRY = "attributes['tool']['retried_ghost_risk'] == 'unsafe'"
GHOST_ALERTS = ("McpUnsafeGhostResponse", "McpGhostResponse", "McpGhostRetried")


async def traffic(peer: RawPeer, vault: Path) -> None:
    for request_id in (1, 2, 3):
        await peer.call(request_id, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    await peer.call(4, "tools/call", {"name": "broken", "arguments": {"text": "hi"}})
    for request_id, reason in ((10, "timed out after 5.0s"), (11, "the user pressed stop")):
        await peer.request(request_id, "tools/call", {"name": "hang", "arguments": {}})
        await peer.cancel(request_id, reason)
    await ghost_then_retry(peer, vault)  # 100 a ghost of shielded_write; 101 wait_started, 102 release, 103 retry


def attribute_table(text: str) -> dict[str, str]:
    """Phoenix's Attributes tab as text: a Key / Value table, one cell a line."""
    cells = text.splitlines()
    cells = cells[cells.index("Value") + 1:]
    return dict(zip(cells[::2], cells[1::2]))


def event_names(text: str) -> list[str]:
    """Phoenix's Events tab as text: each event's time, then its name."""
    return [line for line in text.splitlines() if not re.match(r"\d\d/\d\d/\d{4}, ", line)]


def table_labels(row: str) -> dict[str, str]:
    """A row of Prometheus's table as it prints it: `{a="x", b="y"}`."""
    return dict(re.findall(r'(\w+)="([^"]*)"', row))


def test_the_views_read_text_a_user_sees() -> None:
    assert attribute_table("Attributes\n3\nTable\nJSON\nKey\nValue\ntool.outcome\ncancelled\nmcp.method.name\n"
                           "tools/call") == {"tool.outcome": "cancelled", "mcp.method.name": "tools/call"}
    assert event_names("12/04/2026, 05:17:18 PM\ntool.request_cancelled\n12/04/2026, 05:17:18 PM\n"
                       "tool.ghost_response") == ["tool.request_cancelled", "tool.ghost_response"]
    assert table_labels('{gen_ai_tool_name="echo", tool_outcome="ok"}') == {"gen_ai_tool_name": "echo",
                                                                            "tool_outcome": "ok"}


async def test_phoenix_and_prometheus_pages_show_the_outcomes_the_ghost_and_its_alerts(tmp_path: Path) -> None:
    require("selenium", importlib.util.find_spec("selenium"), "install this package's `views` extra")
    from examples.views import PhoenixViews, PrometheusViews, browser_binaries, headless_chromium, save

    require("Chromium and its driver", browser_binaries(), "apt-get install chromium chromium-driver")
    pictures = os.environ.get("OTEL_MCP_CANCEL_SCREENSHOTS")
    (calls_per_tool,) = dashboard_queries()["Calls by tool and outcome (since the server started)"]
    vault = tmp_path / "vault"
    vault.mkdir()
    with running_phoenix(tmp_path) as phoenix, running_jaeger(tmp_path) as jaeger, \
            running_collector(tmp_path, jaeger, sampled_to={"otlp_http/phoenix": {"endpoint": phoenix.url}}) as \
            collector:
        prometheus = Prometheus(tmp_path, collector.prometheus_port, ALERTS, collector=True)
        try:
            command, *args = instrumented_command(vault)
            parameters = StdioServerParameters(command=command, args=args, env=exporter_environment(collector.endpoint))
            async with stdio_client(parameters) as streams, raw_peer_over(*streams) as peer:
                await traffic(peer, vault)

            # The backends' APIs say only when to look: every kept span stored, every point scraped, the alerts
            # evaluated. What they hold is read from the pages.
            def stored(key: str) -> int:
                return sum(key in span["attributes"] for span in phoenix.spans())
            await eventually(lambda: (stored("tool.ghost_risk"), stored("tool.retried_ghost_risk")) == (1, 1))
            await eventually(lambda: values(prometheus.query(calls_per_tool), "gen_ai_tool_name",
                                            "tool_outcome") == CALLS)
            firing = 'count(ALERTS{alertstate="firing"})'
            await eventually(lambda: list(prometheus.query(firing).values()) == [len(GHOST_ALERTS)])

            browser = headless_chromium()
            try:
                def picture(name: str) -> None:
                    if pictures:
                        save(browser, Path(pictures) / f"{name}.png")

                # Phoenix: the span filter on tool.outcome lists exactly the cancelled calls.
                phoenix_pages = PhoenixViews(browser, phoenix.url)
                rows = phoenix_pages.span_rows(CANCELLED)
                picture("phoenix-cancelled-calls")
                cancelled = sum(count for (_, outcome), count in CALLS.items() if outcome == "cancelled")
                assert len(rows) == cancelled == 3
                assert sorted(re.search(r"tools/call \w+", row).group(0) for row in rows) == [
                    "tools/call hang", "tools/call hang", "tools/call shielded_write"]

                # The ghost's span: cancelled for its caller, its handler's own outcome, its risk, the event.
                ghost = attribute_table(phoenix_pages.span_tab(GHOST, "Attributes"))
                picture("phoenix-ghost-span")
                assert {key: ghost.get(key) for key in ("tool.outcome", "tool.handler_outcome", "tool.ghost_risk",
                                                        "gen_ai.tool.name", "jsonrpc.request.id")} == {
                    "tool.outcome": "cancelled", "tool.handler_outcome": "ok", "tool.ghost_risk": "unsafe",
                    "gen_ai.tool.name": "shielded_write", "jsonrpc.request.id": "100"}
                assert event_names(phoenix_pages.span_tab(GHOST, "Events")) == [
                    "tool.request_cancelled", "tool.ghost_response"]
                picture("phoenix-ghost-events")

                # Its retry: the risk it repeated and the event. Phoenix keeps no span links (its REST API has no
                # field for them either): the link to the ghost's span is seen in Jaeger or Tempo.
                retry = attribute_table(phoenix_pages.span_tab(RETRY, "Attributes"))
                assert (retry["tool.outcome"], retry["tool.retried_ghost_risk"], retry["jsonrpc.request.id"]) == (
                    "ok", "unsafe", "103")
                assert event_names(phoenix_pages.span_tab(RETRY, "Events")) == ["tool.ghost_retry"]
                assert all("links" not in span for span in phoenix.spans())

                # Prometheus's own graph page: the dashboard's calls by tool and outcome, one row each.
                prometheus_pages = PrometheusViews(browser, prometheus.url)
                table = prometheus_pages.table(calls_per_tool)
                picture("prometheus-calls-by-outcome")
                assert {(labels["gen_ai_tool_name"], labels["tool_outcome"]): value
                        for labels, value in ((table_labels(row), value) for row, value in table.items())} == CALLS
                unsafe_last_hour = prometheus_pages.table(documented_query("Prometheus (our counter)"))
                assert {table_labels(row)["gen_ai_tool_name"]: value for row, value in unsafe_last_hour.items()} == {
                    "shielded_write": 1}

                # Its alerts page: the three ghost alerts firing, one alert each (one tool, one risk).
                # The page's firing alert names the tool.
                alerts = prometheus_pages.alerts(opened="McpUnsafeGhostResponse")
                picture("prometheus-ghost-alerts")
                active = dict(re.findall(r"^(Mcp\w+) \((\d+) active\)$", alerts, re.MULTILINE))
                assert active == {name: "1" if name in GHOST_ALERTS else "0" for name in alert_queries()}
                (alert,) = [line for line in alerts.splitlines() if line.startswith('alertname="')]
                assert re.match(r'alertname="McpUnsafeGhostResponse" gen_ai_tool_name="shielded_write" '
                                r'severity="page" FIRING ', alert), alert
            finally:
                browser.quit()
        finally:
            prometheus.stop()
