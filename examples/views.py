"""What a user looks at: Phoenix's span table and span view, Prometheus's own graph and alerts pages, opened in
headless Chromium, read as the page's text and saved as pictures. Used by tests/test_views.py (which asserts
what the pages say) and by examples/screenshots.py (which saves them, for any stack)."""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.parse
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

# Long enough for a page to load on a loaded two-core machine; a view that never shows fails, it never passes.
PAGE_SECONDS = 30


def browser_binaries() -> tuple[str, str] | None:
    """Chromium and its driver (Debian's `chromium` and `chromium-driver`), or None where either is missing."""
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


def headless_chromium() -> WebDriver:
    chromium, driver = browser_binaries() or ("chromium", "chromedriver")
    options = Options()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,900"):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(driver))


def _shown(browser: WebDriver, by: str, selector: str):
    """The first element `selector` finds, once the page shows one."""
    waiting = WebDriverWait(browser, PAGE_SECONDS, poll_frequency=0.2)
    return waiting.until(lambda _: browser.find_elements(by, selector))[0]


def _settled(browser: WebDriver, read) -> str:
    """What `read()` returns once two readings a moment apart agree (a page fills in as its data arrives)."""
    readings: list[str] = []

    def same_twice(_: WebDriver) -> bool:
        readings.append(read())
        return len(readings) > 2 and readings[-1] == readings[-2] == readings[-3]

    # A page that re-renders while it is read leaves the reading's elements stale: that reading does not count.
    WebDriverWait(browser, PAGE_SECONDS, poll_frequency=0.5,
                  ignored_exceptions=(StaleElementReferenceException,)).until(same_twice)
    return readings[-1]


class PhoenixViews:
    """Arize Phoenix's UI at `url`, for the spans of one project."""

    def __init__(self, browser: WebDriver, url: str, project: str = "default") -> None:
        self.browser, self.url = browser, url.rstrip("/")
        with urllib.request.urlopen(f"{self.url}/v1/projects", timeout=10) as reply:
            (self.project_id,) = [p["id"] for p in json.load(reply)["data"] if p["name"] == project]

    def span_rows(self, condition: str) -> list[str]:
        """The span table filtered by `condition` (Phoenix's filter, which reads a dotted key as nested:
        `attributes['tool']['outcome']`): each row's text."""
        query = urllib.parse.urlencode({"spanFilterCondition": condition})
        self.browser.get(f"{self.url}/projects/{self.project_id}/spans?{query}")
        _shown(self.browser, By.CSS_SELECTOR, ".cm-content")  # the filter, shown once the page is built
        rows = _settled(self.browser, lambda: "\n".join(
            row.text.replace("\n", " | ") for row in self.browser.find_elements(By.CSS_SELECTOR, "tbody tr")))
        return [row for row in rows.splitlines() if row]

    def span_tab(self, condition: str, tab: str) -> str:
        """The first span matching `condition`, opened: the text of its `tab` (Info, Attributes, Events)."""
        self.span_rows(condition)
        _shown(self.browser, By.CSS_SELECTOR, "tbody tr a").click()
        _shown(self.browser, By.XPATH, f"//*[@role='tab'][starts-with(normalize-space(.), '{tab}')]").click()
        return _settled(self.browser, lambda: self.browser.find_elements(By.CSS_SELECTOR, "[role='tabpanel']")[-1].text)


class PrometheusViews:
    """Prometheus's own pages at `url` (the classic UI, which Debian's Prometheus serves)."""

    def __init__(self, browser: WebDriver, url: str) -> None:
        self.browser, self.url = browser, url.rstrip("/")

    def table(self, expr: str) -> dict[str, float]:
        """The graph page's Table tab for `expr`: each row's labels (as the page prints them) and value."""
        query = urllib.parse.urlencode({"g0.expr": expr, "g0.tab": "1", "g0.range_input": "1h"})
        self.browser.get(f"{self.url}/classic/graph?{query}")
        _shown(self.browser, By.CSS_SELECTOR, ".console_table")

        def rows() -> str:
            return "\n".join(" ".join(cell.text for cell in cells) for row in
                             self.browser.find_elements(By.CSS_SELECTOR, ".console_table tr")
                             if len(cells := row.find_elements(By.TAG_NAME, "td")) == 2)
        table = _settled(self.browser, rows)
        return {labels: float(value) for labels, value in
                (re.match(r"(.*\S)\s+(\S+)$", row).groups() for row in table.splitlines() if row.strip())}

    def alerts(self, opened: str | None = None) -> str:
        """The alerts page, with the rule named `opened` opened to show its alerts: its text."""
        self.browser.get(f"{self.url}/classic/alerts")
        if opened is not None:
            _shown(self.browser, By.XPATH, f"//*[normalize-space(text())='{opened}']").click()
        return _settled(self.browser, lambda: self.browser.find_element(By.TAG_NAME, "body").text)


def save(browser: WebDriver, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(path))
    return path
