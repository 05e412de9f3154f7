"""Real telemetry backends for the end-to-end tests: the OpenTelemetry Collector built from
collector-config/builder-config.yaml and Jaeger v2, both built by `.ci/build-backends`, each run on
127.0.0.1 with ports of its own and stopped by the test that started it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import yaml

from tests.subprocess_servers import free_port, require, stop_process, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_COLLECTOR_CONFIG = ROOT / "collector-config" / "otelcol-contrib.yaml"
AGENT_COLLECTOR_CONFIG = ROOT / "collector-config" / "otelcol-agent.yaml"
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
    otlp_grpc_port: int
    prometheus_port: int
    received_file: Path  # every span it received, written before it samples (a file exporter), if asked

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.otlp_http_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.otlp_grpc_port}"

    def scrape(self) -> str:
        """The collector's Prometheus exporter, as Prometheus scrapes it."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.prometheus_port}/metrics", timeout=10) as response:
            return response.read().decode()

    def received_traces(self) -> dict[str, set[str]]:
        """Trace id -> the ids of its spans this collector received (`record_spans=True`)."""
        traces: dict[str, set[str]] = {}
        if not self.received_file.exists():
            return traces
        for line in self.received_file.read_text().splitlines():
            for resource in json.loads(line)["resourceSpans"]:
                for scope in resource["scopeSpans"]:
                    for span in scope["spans"]:
                        traces.setdefault(span["traceId"], set()).add(span["spanId"])
        return traces


def configured(source: Path, changes: dict[str, Any], written: Path) -> Path:
    """`source` as shipped but for `changes`, keyed as the collector's --set keys them ("a::b::c")."""
    config = yaml.safe_load(source.read_text())
    for key, value in changes.items():
        *parents, last = key.split("::")
        node = config
        for parent in parents:
            node = node.setdefault(parent, {})
        node[last] = value
    written.write_text(yaml.safe_dump(config))
    return written


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
            stop_process(process)


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
def running_collector(tmp_path: Path, jaeger: Jaeger, name: str = "collector", decision_wait: str = "1s",
                      logs_to: str | None = None, record_spans: bool = False,
                      sampled_to: dict[str, dict[str, Any]] | None = None) -> Iterator[Collector]:
    """The shipped collector config as written, but for its listening addresses, Jaeger's and the logs
    backend's (`logs_to`, an OTLP/HTTP endpoint), tail sampling's decision wait (a test's traces are whole
    within a second, unless it loads the machine) and how often span metrics are flushed (every minute by
    default). `record_spans`: a file exporter beside the sampling, to see every span it received. `sampled_to`:
    more exporters of the sampled traces, beside Jaeger (as a user adds Phoenix), by name and config."""
    collector = Collector(otlp_http_port=free_port(), otlp_grpc_port=free_port(), prometheus_port=free_port(),
                          received_file=tmp_path / f"{name}-received.jsonl")
    changes: dict[str, Any] = {
        "receivers::otlp::protocols::grpc::endpoint": collector.grpc_address,
        "receivers::otlp::protocols::http::endpoint": f"127.0.0.1:{collector.otlp_http_port}",
        "exporters::otlp_grpc/jaeger::endpoint": f"127.0.0.1:{jaeger.otlp_port}",
        "exporters::otlp_http/loki::endpoint": logs_to or "http://127.0.0.1:9",
        "exporters::prometheus::endpoint": f"127.0.0.1:{collector.prometheus_port}",
        "processors::tail_sampling::decision_wait": decision_wait,
        "connectors::span_metrics::metrics_flush_interval": "1s",
        "service::telemetry::metrics::level": "none",
    }
    if record_spans:
        shipped = yaml.safe_load(SHIPPED_COLLECTOR_CONFIG.read_text())["service"]["pipelines"]["traces"]
        changes["exporters::file/received"] = {"path": str(collector.received_file)}
        changes["service::pipelines::traces::exporters"] = [*shipped["exporters"], "file/received"]
    if sampled_to:
        shipped = yaml.safe_load(SHIPPED_COLLECTOR_CONFIG.read_text())["service"]["pipelines"]["traces/sampled"]
        changes.update({f"exporters::{exporter}": config for exporter, config in sampled_to.items()})
        changes["service::pipelines::traces/sampled::exporters"] = [*shipped["exporters"], *sampled_to]
    config = configured(SHIPPED_COLLECTOR_CONFIG, changes, tmp_path / f"{name}.yaml")
    command = [str(backends_bin() / "otelcol-mcp"), "--config", str(config)]
    with _running(command, tmp_path / f"{name}.log",
                  (collector.otlp_http_port, collector.otlp_grpc_port, collector.prometheus_port)):
        yield collector


@dataclass
class Phoenix:
    http_port: int

    @property
    def url(self) -> str:
        """Its UI, its REST API, and its OTLP/HTTP receiver (`/v1/traces`)."""
        return f"http://127.0.0.1:{self.http_port}"

    def spans(self, project: str = "default") -> list[dict[str, Any]]:
        """Every span it holds in `project`, through its REST API."""
        url = f"{self.url}/v1/projects/{project}/spans?limit=1000"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)["data"]


def phoenix_command() -> str:
    return require("Arize Phoenix", os.environ.get("OTEL_MCP_CANCEL_PHOENIX") or shutil.which("phoenix"),
                   "pip install arize-phoenix in an environment of its own and set OTEL_MCP_CANCEL_PHOENIX to its "
                   "`phoenix` (.ci/run does)")


@contextmanager
def running_phoenix(tmp_path: Path) -> Iterator[Phoenix]:
    """Arize Phoenix from PyPI, its HTTP and gRPC ports on 127.0.0.1, its database in `tmp_path`."""
    command = phoenix_command()
    phoenix = Phoenix(http_port=free_port())
    environment = {**os.environ, "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(phoenix.http_port),
                   "PHOENIX_GRPC_PORT": str(free_port()), "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix")}
    with (tmp_path / "phoenix.log").open("wb") as output:
        process = subprocess.Popen([command, "serve"], stdout=output, stderr=subprocess.STDOUT, env=environment)
        try:
            wait_for_port(phoenix.http_port, process, seconds=120)  # it migrates its database first
            yield phoenix
        finally:
            stop_process(process)


@dataclass
class Agent:
    otlp_http_port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.otlp_http_port}"


@contextmanager
def running_agent(tmp_path: Path, name: str, gateways: list[Collector]) -> Iterator[Agent]:
    """collector-config/otelcol-agent.yaml as shipped, but for its listening addresses and its gateways'."""
    agent = Agent(otlp_http_port=free_port())
    changes = {
        "receivers::otlp::protocols::grpc::endpoint": f"127.0.0.1:{free_port()}",
        "receivers::otlp::protocols::http::endpoint": f"127.0.0.1:{agent.otlp_http_port}",
        "service::telemetry::metrics::level": "none",
    }
    for exporter in yaml.safe_load(AGENT_COLLECTOR_CONFIG.read_text())["exporters"]:
        changes[f"exporters::{exporter}::resolver::static::hostnames"] = [g.grpc_address for g in gateways]
    config = configured(AGENT_COLLECTOR_CONFIG, changes, tmp_path / f"{name}.yaml")
    command = [str(backends_bin() / "otelcol-mcp"), "--config", str(config)]
    with _running(command, tmp_path / f"{name}.log", (agent.otlp_http_port,)):
        yield agent


def validate(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(backends_bin() / "otelcol-mcp"), "validate", "--config", str(config)],
                          capture_output=True, text=True, timeout=60)


def run_backend(binary: str, *arguments: str) -> str:
    """A built backend's command that prints and exits: what it printed to standard output."""
    done = subprocess.run([str(backends_bin() / binary), *arguments], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def series(scrape: str, metric: str, **labels: str) -> float:
    """The sum of a metric's samples in a Prometheus text scrape whose labels include `labels`."""
    total = 0.0
    for line in scrape.splitlines():
        match = re.match(rf"{metric}\{{(.*)\}} (\S+)$", line)
        if match and all(f'{key}="{value}"' in match.group(1) for key, value in labels.items()):
            total += float(match.group(2))
    return total


async def eventually(condition: Any, seconds: float = 60) -> None:
    """Polls a backend (which has no way to say "done") for what the test caused, a few times a second;
    fails, never passes, on the deadline."""
    with anyio.fail_after(seconds):
        while not condition():
            await anyio.sleep(0.25)
