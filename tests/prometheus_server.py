"""A real Prometheus (Debian's package) on 127.0.0.1, scraping one target every second."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.subprocess_servers import free_port, require_debian_binary, stop_process

SHIPPED_CONFIG = Path(__file__).resolve().parent.parent / "collector-config" / "prometheus" / "prometheus.yml"


class Prometheus:
    """`collector=True`: the target is the shipped collector's exporter, scraped by the shipped job as written
    (but for its address); otherwise a server's own exporter, scraped by a job of its own."""

    def __init__(self, workdir: Path, target_port: int, rule_file: Path, *flags: str, collector: bool = False) -> None:
        self.port = free_port()
        target = {"targets": [f"127.0.0.1:{target_port}"]}
        if collector:
            (job,) = yaml.safe_load(SHIPPED_CONFIG.read_text())["scrape_configs"]
            job["static_configs"] = [target]
        else:
            job = {"job_name": "mcp-server", "static_configs": [target]}
        config = workdir / "prometheus.yml"
        config.write_text(json.dumps({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rule_file)],
            "scrape_configs": [job],
        }))
        self.process = subprocess.Popen(
            [
                require_debian_binary("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
                *flags,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while not self._ready():
            assert self.process.poll() is None, self.process.stderr.read().decode()
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1) as reply:
                return reply.status == 200
        except OSError:
            return False

    def page_status(self, path: str) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as reply:
            return reply.status

    def query(self, expr: str) -> dict[tuple[tuple[str, str], ...], float]:
        """An instant query: each series' labels (sorted pairs) and its value."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as reply:
            body: dict[str, Any] = json.load(reply)
        assert body["status"] == "success", body
        return {
            tuple(sorted(series["metric"].items())): float(series["value"][1]) for series in body["data"]["result"]
        }

    def exemplars(self, expr: str) -> list[dict[str, str]]:
        """The exemplars stored for a query's series over the last hour: each one's labels (its trace_id)."""
        now = time.time()
        query = {"query": expr, "start": str(now - 3600), "end": str(now + 60)}
        url = f"http://127.0.0.1:{self.port}/api/v1/query_exemplars?" + urllib.parse.urlencode(query)
        with urllib.request.urlopen(url, timeout=10) as reply:
            body: dict[str, Any] = json.load(reply)
        assert body["status"] == "success", body
        return [exemplar["labels"] for series in body["data"] for exemplar in series["exemplars"]]

    def stop(self) -> None:
        stop_process(self.process)
