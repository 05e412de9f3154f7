"""Pictures of the plugin's telemetry in the backends' own pages, saved as PNGs (headless Chromium).

    python examples/screenshots.py --out docs/images
        Runs tests/test_views.py on this machine: calls with known outcomes through the shipped collector config
        into Arize Phoenix and Prometheus, every view checked against them, then saved. Needs what that test
        needs: the backends `.ci/build-backends` builds, `phoenix` (or OTEL_MCP_CANCEL_PHOENIX), Debian's
        prometheus, chromium and chromium-driver, and `pip install -e '.[test,views]'`.

    python examples/screenshots.py --out shots --phoenix http://localhost:6006 --prometheus http://localhost:9090
        The same views of your own stack, after your own traffic (examples/traffic.py makes some); nothing is
        checked. Either URL may be left out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DASHBOARD = ROOT / "collector-config" / "grafana" / "dashboards" / "mcp-tool-outcomes.json"
CANCELLED_CALLS = "attributes['tool']['outcome'] == 'cancelled'"
ANY_GHOST = "attributes['tool']['handler_outcome'] is not None"


def calls_by_tool_and_outcome() -> str:
    (panel,) = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["title"].startswith("Calls by tool")]
    return panel["targets"][0]["expr"]


def shoot_your_stack(out: Path, phoenix: str | None, prometheus: str | None) -> None:
    from examples.views import PhoenixViews, PrometheusViews, headless_chromium, save

    browser = headless_chromium()
    try:
        if phoenix:
            pages = PhoenixViews(browser, phoenix)
            print(f"{len(pages.span_rows(CANCELLED_CALLS))} cancelled calls listed")
            save(browser, out / "phoenix-cancelled-calls.png")
            if pages.span_rows(ANY_GHOST):
                pages.span_tab(ANY_GHOST, "Attributes")
                save(browser, out / "phoenix-ghost-span.png")
                pages.span_tab(ANY_GHOST, "Events")
                save(browser, out / "phoenix-ghost-events.png")
        if prometheus:
            pages = PrometheusViews(browser, prometheus)
            print(f"{len(pages.table(calls_by_tool_and_outcome()))} (tool, outcome) rows")
            save(browser, out / "prometheus-calls-by-outcome.png")
            pages.alerts()
            save(browser, out / "prometheus-ghost-alerts.png")
    finally:
        browser.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the folder the PNGs are written to")
    parser.add_argument("--phoenix", help="your Phoenix's URL (its UI), instead of this machine's test stack")
    parser.add_argument("--prometheus", help="your Prometheus's URL, instead of this machine's test stack")
    options = parser.parse_args()
    out = options.out.resolve()
    if options.phoenix or options.prometheus:
        shoot_your_stack(out, options.phoenix, options.prometheus)
    else:
        environment = {**os.environ, "OTEL_MCP_CANCEL_SCREENSHOTS": str(out)}
        test = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--backends", "tests/test_views.py"]
        if subprocess.run(test, cwd=ROOT, env=environment).returncode != 0:
            return 1
    for picture in sorted(out.glob("*.png")):
        print(picture)
    return 0


if __name__ == "__main__":
    sys.exit(main())
