"""The README's first screen is true: its test command passes on any machine in a few minutes (what needs
valgrind, a package index or a benchmark's run is marked `long` and skipped unless `--long`), and a user's
install and usage, run as written in a fresh environment, export a real server's and client's spans."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
import venv
from pathlib import Path

import pytest

from examples.otlp_sink import OtlpSink
from tests.support import MCP_MAJOR
from tests.test_exit import ENDPOINTS, PATHS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SCOPE = "otel_mcp_cancel"
# What only a long run may do: count instructions, run a benchmark, make an environment from a package index.
LONG_WORK = ("valgrind", "--instructions", "venv.create", "pip install")


def first_screen_blocks() -> list[tuple[str, str]]:
    """The fenced code blocks above the README's first section: (language, text)."""
    head = README.read_text().split("\n## ", 1)[0]
    return re.findall(r"^```(\w+)\n(.*?)^```", head, re.MULTILINE | re.DOTALL)


def pytest_run(*arguments: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *arguments],
        cwd=ROOT, capture_output=True, text=True, timeout=110,
    )
    assert done.returncode in (0, 5), done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def collected(*arguments: str) -> set[str]:
    return {line for line in pytest_run("--collect-only", "-q", *arguments).splitlines() if "::" in line}


def test_the_readme_test_command_is_the_default_run() -> None:
    (repository,) = [text for language, text in first_screen_blocks() if "pytest" in text]
    assert re.search(r"^\.venv/bin/python -m pytest$", repository, re.MULTILINE), repository


def test_the_default_run_skips_every_long_test_and_only_those_do_long_work() -> None:
    long_tests = collected("-m", "long")
    expected = {
        "tests/test_hot_path_smoke.py::test_the_hot_path_benchmark_counts_instructions_in_smoke_mode",
        "tests/test_readme.py::test_the_users_install_and_usage_work_as_written",
        "tests/test_new_release.py::test_every_hook_is_seen_at_work_and_each_moved_loses_its_capabilities_and_"
        "nothing_else[asyncio]",
    }
    if MCP_MAJOR == 2:
        expected |= {"tests/v2/test_benchmark_smoke.py::test_the_benchmark_runs_every_set_up_in_smoke_mode",
                     "tests/v2/test_benchmark_smoke.py::test_the_load_benchmark_runs_every_mode_and_counts_every_"
                     "workers_calls_in_smoke_mode",
                     "tests/v2/test_benchmark_smoke.py::test_the_crossing_sweep_runs_both_revisions_and_finds_no_"
                     "false_ghost_in_smoke_mode"}
    expected |= {f"tests/test_exit.py::test_the_exit_with_the_endpoint_down_takes_at_most_a_second_more_than_the_sdk_"
                 f"alone[{path}-{endpoint}]" for path in PATHS for endpoint in ENDPOINTS}
    assert long_tests == expected
    # Without --long each of them is skipped, and says how to run it.
    summary = pytest_run("-m", "long", "-rs", *sorted(long_tests))
    closing = summary.splitlines()[-1]
    assert re.search(rf"= {len(long_tests)} skipped\b", closing) and "passed" not in closing, summary[-2000:]
    said = re.findall(r"^SKIPPED \[(\d+)\] .*: long: run with --long \(CI does\)$", summary, re.MULTILINE)
    assert sum(map(int, said)) == len(long_tests), summary[-2000:]
    # No test left in the default run does a long test's work.
    for test_id in collected("-m", "not long"):
        path, name = test_id.split("::")[0], test_id.split("::")[-1].split("[")[0]
        source = (ROOT / path).read_text()
        (function,) = [node for node in ast.walk(ast.parse(source))
                       if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name]
        body = ast.get_source_segment(source, function)
        assert not [word for word in LONG_WORK if word in body], test_id


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_and_picture_in_the_readmes_resolves() -> None:
    """What the site's strict build checks for docs/, checked here for the READMEs as GitHub shows them, and
    every picture the docs show."""
    for page in (README, ROOT / "examples" / "README.md", ROOT / "benchmarks" / "README.md"):
        for target, anchor in re.findall(r"\]\(([^)\s#]*)(?:#([^)\s]*))?\)", page.read_text()):
            if "://" in target:
                continue
            linked = (page.parent / target).resolve() if target else page
            assert linked.is_file(), f"{page.name}: {target}"
            if anchor:
                headings = re.findall(r"^#+ (.+)$", linked.read_text(), re.MULTILINE)
                assert anchor in {github_anchor(heading) for heading in headings}, f"{page.name}: {target}#{anchor}"
    for page in sorted((ROOT / "docs").glob("*.md")):
        for picture in re.findall(r"!\[[^\]]+\]\(([^)\s]+)\)", page.read_text()):
            assert (page.parent / picture).is_file(), f"{page.name}: {picture}"


def test_the_first_screen_shows_the_ghosts_span_and_the_outcome_breakdown() -> None:
    """The pictures tests/test_views.py takes of real pages (examples/screenshots.py saves them)."""
    head = README.read_text().split("\n## ", 1)[0]
    pictures = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", head)
    assert pictures == ["docs/images/phoenix-ghost-span.png", "docs/images/prometheus-calls-by-outcome.png"]
    views = (ROOT / "tests" / "test_views.py").read_text()
    for picture in pictures:
        assert (ROOT / picture).read_bytes().startswith(b"\x89PNG")
        assert f'picture("{Path(picture).stem}")' in views


def shell_words(block: str) -> list[str]:
    """A bash block's words, its continued lines joined and its comments dropped."""
    return shlex.split(block.replace("\\\n", " "), comments=True)


@pytest.mark.long
@pytest.mark.timeout(900)
@pytest.mark.skipif(importlib.util.find_spec("fastmcp") is not None, reason="once per SDK line is enough")
def test_the_users_install_and_usage_work_as_written(tmp_path: Path) -> None:
    blocks = first_screen_blocks()
    (install,) = [shell_words(text) for language, text in blocks if text.startswith("pip install")]
    (run,) = [shell_words(text) for language, text in blocks if "opentelemetry-instrument" in text
              and "pip" not in text]
    (in_code,) = [text for language, text in blocks if language == "python"]

    # A fresh environment with the install line as written (the checkout for ./otel-mcp-cancel), beside the
    # mcp (and pydantic: mcp 1.12 needs one before 2.12) the user's server already has.
    environment_dir = tmp_path / "venv"
    venv.create(environment_dir, with_pip=True)
    python = environment_dir / "bin" / "python"
    packages = [str(ROOT) if word == "./otel-mcp-cancel" else word for word in install[2:]]
    servers = [f"{name}=={importlib.metadata.version(name)}" for name in ("mcp", "pydantic")]
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           *packages, *servers], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    # The run line's variables, the endpoint pointed at a receiver here; the server under
    # opentelemetry-instrument, a client instrumented in code by the README's block.
    settings = dict(word.split("=", 1) for word in run if "=" in word)
    assert run[len(settings):] == ["opentelemetry-instrument", "python", "server.py"], run
    sink = OtlpSink().start()
    try:
        settings["OTEL_EXPORTER_OTLP_ENDPOINT"] = sink.endpoint
        (tmp_path / "server.py").write_text(SERVER)
        (tmp_path / "client.py").write_text(CLIENT.replace("# THE README'S BLOCK\n", in_code))
        environment = {**{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}, **settings,
                       "PATH": f"{environment_dir / 'bin'}:{os.environ['PATH']}"}
        done = subprocess.run([str(python), "client.py", sink.endpoint], cwd=tmp_path, env=environment,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip() == "hello"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len([s for s in sink.spans if s.name == "tools/call echo"]) < 2:
            time.sleep(0.1)
        (server,) = [s for s in sink.server_spans(SCOPE) if s.name == "tools/call echo"]
        (client,) = [s for s in sink.spans if s.kind == "CLIENT" and s.name == "tools/call echo"]
        assert server.attributes["tool.outcome"] == client.attributes["tool.outcome"] == "ok"
        assert (server.trace_id, server.parent_span_id) == (client.trace_id, client.span_id)
        assert {s.resource.get("service.name") for s in sink.server_spans(SCOPE)} == {settings["OTEL_SERVICE_NAME"]}
        assert [p for p in sink.points if p.metric == "mcp.server.operation.duration"]
    finally:
        sink.stop()


SERVER = textwrap.dedent('''\
    try:
        from mcp.server.mcpserver import MCPServer as Server
    except ImportError:  # mcp 1.x
        from mcp.server.fastmcp import FastMCP as Server

    server = Server("readme")


    @server.tool()
    def echo(text: str) -> str:
        return text


    server.run()
''')

CLIENT = textwrap.dedent('''\
    import os
    import sys

    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # The application's own set-up, as the README's block expects it.
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[1] + "/v1/traces")))
    trace.set_tracer_provider(provider)

    # THE README'S BLOCK


    async def main():
        # The README's line, as a shell would run it (the SDK passes a stdio server only a few variables).
        server = StdioServerParameters(command="opentelemetry-instrument", args=["python", "server.py"],
                                       env=dict(os.environ))
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("echo", {"text": "hello"})
        print(result.content[0].text)


    anyio.run(main)
    provider.shutdown()
''')
