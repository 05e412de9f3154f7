"""Real telemetry backends for the end-to-end tests: the OpenTelemetry Collector built from
collector-config/builder-config.yaml and Jaeger v2, both built by `.ci/build-backends`, each run on
127.0.0.1 with ports of its own and stopped by the test that started it."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from tests.subprocess_servers import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_COLLECTOR_CONFIG = ROOT / "collector-config" / "otelcol-contrib.yaml"
# Where `.ci/build-backends` puts the binaries unless told otherwise.
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
DEFAULT_BIN = CACHE / "otel-mcp-cancel" / "backends" / "current"


def backends_bin() -> Path:
    return Path(os.environ.get("OTEL_MCP_CANCEL_BACKENDS", DEFAULT_BIN))


def missing_binaries() -> list[str]:
    return [name for name in ("otelcol-mcp", "jaeger") if not (backends_bin() / name).is_file()]


JAEGER_CONFIG = """
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query_port}
    grpc:
      endpoint: 127.0.0.1:{query_grpc_port}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp_port}
      http:
        endpoint: 127.0.0.1:{otlp_http_port}
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


@dataclass
class Jaeger:
    otlp_port: int
    query_port: int
    otlp_http_port: int

    @property
    def endpoint(self) -> str:
        """Its OTLP/HTTP receiver: for servers that export to it straight, with no collector between."""
        return f"http://127.0.0.1:{self.otlp_http_port}"

    def traces(self, service: str, tags: dict[str, str] | None = None, limit: int = 10_000) -> list[dict[str, Any]]:
        """Jaeger's HTTP API (what its UI reads): the traces of `service` with spans matching `tags`."""
        query = {"service": service, "limit": str(limit), "lookback": "1h"}
        if tags:
            query["tags"] = json.dumps(tags)
        return self._data("/api/traces", query)

    def get(self, path: str) -> list[dict[str, Any]]:
        """An API path as a user would type it (a query string with raw JSON in it): the traces it returns."""
        base, _, query = path.partition("?")
        return self._data(base, {key: value for key, _, value in (pair.partition("=") for pair in query.split("&"))})

    def _data(self, path: str, query: dict[str, str]) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.query_port}{path}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)["data"] or []


@dataclass
class Collector:
    otlp_http_port: int
    prometheus_port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.otlp_http_port}"

    def scrape(self) -> str:
        """The collector's Prometheus exporter, as Prometheus scrapes it."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.prometheus_port}/metrics", timeout=10) as response:
            return response.read().decode()


@contextmanager
def _running(command: list[str], log: Path, ports: tuple[int, ...]) -> Iterator[None]:
    """A backend process, its output in `log`, until the test is done with it; ready once it listens on
    every port."""
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        try:
            for port in ports:
                wait_for_port(port, process)
            yield
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def running_jaeger(tmp_path: Path) -> Iterator[Jaeger]:
    jaeger = Jaeger(otlp_port=free_port(), query_port=free_port(), otlp_http_port=free_port())
    config = tmp_path / "jaeger.yaml"
    config.write_text(JAEGER_CONFIG.format(query_port=jaeger.query_port, query_grpc_port=free_port(),
                                           otlp_port=jaeger.otlp_port, otlp_http_port=jaeger.otlp_http_port))
    command = [str(backends_bin() / "jaeger"), "--config", str(config)]
    with _running(command, tmp_path / "jaeger.log", (jaeger.query_port, jaeger.otlp_port, jaeger.otlp_http_port)):
        yield jaeger


@contextmanager
def running_collector(tmp_path: Path, jaeger: Jaeger) -> Iterator[Collector]:
    """The shipped collector config as written, but for its listening addresses and Jaeger's (loopback,
    ports of its own), tail sampling's decision wait (a test's traces are whole within a second) and how
    often span metrics are flushed (every minute by default)."""
    collector = Collector(otlp_http_port=free_port(), prometheus_port=free_port())
    overrides = {
        "receivers::otlp::protocols::grpc::endpoint": f"127.0.0.1:{free_port()}",
        "receivers::otlp::protocols::http::endpoint": f"127.0.0.1:{collector.otlp_http_port}",
        "exporters::otlp/jaeger::endpoint": f"127.0.0.1:{jaeger.otlp_port}",
        "exporters::prometheus::endpoint": f"127.0.0.1:{collector.prometheus_port}",
        "processors::tail_sampling::decision_wait": "1s",
        "connectors::spanmetrics::metrics_flush_interval": "1s",
        "service::telemetry::metrics::level": "none",
    }
    command = [str(backends_bin() / "otelcol-mcp"), "--config", str(SHIPPED_COLLECTOR_CONFIG)]
    command += [argument for key, value in overrides.items() for argument in ("--set", f"{key}={value}")]
    with _running(command, tmp_path / "collector.log", (collector.otlp_http_port, collector.prometheus_port)):
        yield collector


def validate(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(backends_bin() / "otelcol-mcp"), "validate", "--config", str(config)],
                          capture_output=True, text=True, timeout=60)


async def eventually(condition: Any, seconds: float = 60) -> None:
    """Polls a backend (which has no way to say "done") for what the test caused, a few times a second;
    fails, never passes, on the deadline."""
    with anyio.fail_after(seconds):
        while not condition():
            await anyio.sleep(0.25)
