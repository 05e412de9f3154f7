"""Draw a ghost and its retry as a trace timeline (SVG), from spans a real instrumented server exported.

    python examples/draw_trace.py docs/ghost-and-retry.svg

Runs the notes vault under `opentelemetry-instrument` with the embedded OTLP receiver, makes one
ghost (`append_journal` times out, then commits) and retries it, and draws the server's spans as a
trace view would: one bar per span, its events as marks, the retry's link to its ghost.
"""

from __future__ import annotations

import sys
import tempfile
from html import escape
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from examples.otlp_sink import OtlpSink, ReceivedSpan, exporter_environment  # noqa: E402

SERVER = Path(__file__).with_name("notes_server.py")
WIDTH, ROW, LEFT = 960, 64, 310
MARKS = {
    "tool.request_cancelled": "#e0a800",
    "tool.ghost_response": "#c0392b",
    "tool.ghost_retry": "#8e44ad",
}


async def ghost_and_retry(sink: OtlpSink) -> list[ReceivedSpan]:
    arguments = {"line": "paid invoice 42", "seconds": 0.4}
    with tempfile.TemporaryDirectory(prefix="notes-trace-") as workdir:
        server = StdioServerParameters(
            command=str(Path(sys.executable).with_name("opentelemetry-instrument")),
            args=[sys.executable, str(SERVER), str(Path(workdir) / "vault")],
            env=exporter_environment(sink.endpoint),
        )
        with (Path(workdir) / "server.log").open("w") as errlog:
            async with Client(stdio_client(server, errlog=errlog)) as client:
                try:
                    await client.call_tool("append_journal", arguments, read_timeout_seconds=0.1)
                except Exception:
                    pass  # the caller sees a timeout; the server commits anyway
                await anyio.sleep(0.6)
                await client.call_tool("append_journal", arguments)  # the retry: the line is written twice
    with anyio.fail_after(15):
        while len([s for s in sink.server_spans("otel_mcp_cancel") if s.name.endswith("append_journal")]) < 2:
            await anyio.sleep(0.05)
    return [s for s in sink.server_spans("otel_mcp_cancel") if s.name.endswith("append_journal")]


def svg(spans: list[ReceivedSpan]) -> str:
    spans = sorted(spans, key=lambda s: s.start_ns)
    start = spans[0].start_ns
    scale = (WIDTH - LEFT - 30) / max(max(s.end_ns for s in spans) - start, 1)
    x = lambda ns: LEFT + (ns - start) * scale  # noqa: E731
    height = 60 + ROW * len(spans) + 70
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif"'
        ' font-size="13">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        '<text x="12" y="24" font-size="15" font-weight="bold">notes-mcp-server: a ghost and its retry'
        " (server spans exported by otel-mcp-cancel)</text>",
    ]
    rows = {}
    for row, span in enumerate(spans):
        y = 50 + ROW * row
        rows[span.span_id] = y
        outcome = span.attributes.get("tool.outcome")
        out.append(f'<text x="12" y="{y + 16}">{escape(span.name)}</text>')
        out.append(f'<text x="12" y="{y + 34}" fill="#555">tool.outcome={escape(str(outcome))}'
                   f" · request {escape(str(span.attributes.get('jsonrpc.request.id')))}</text>")
        colour = "#7f8c8d" if outcome == "cancelled" else "#27ae60"
        width = max((span.end_ns - span.start_ns) * scale, 2)
        out.append(f'<rect x="{x(span.start_ns):.1f}" y="{y + 4}" width="{width:.1f}" height="18" rx="3"'
                   f' fill="{colour}"/>')
        for name, at_ns, _ in span.timed_events:
            out.append(f'<circle cx="{x(at_ns):.1f}" cy="{y + 13}" r="6" fill="{MARKS.get(name, "#333")}"/>')
    for span in spans:
        for linked in span.links:
            if linked in rows:
                out.append(f'<path d="M {LEFT - 8} {rows[span.span_id] + 13} C {LEFT - 40} {rows[span.span_id] + 13},'
                           f' {LEFT - 40} {rows[linked] + 13}, {LEFT - 8} {rows[linked] + 13}" stroke="#8e44ad"'
                           ' fill="none" stroke-dasharray="4 3"/>')
    legend_y = height - 40
    for n, (name, colour) in enumerate(MARKS.items()):
        out.append(f'<circle cx="{20 + 290 * n}" cy="{legend_y}" r="6" fill="{colour}"/>')
        out.append(f'<text x="{32 + 290 * n}" y="{legend_y + 5}">{name}</text>')
    out.append(f'<text x="12" y="{legend_y + 26}" fill="#555">dashed: the retry\'s span link to its ghost.'
               " Bars: receipt until the answer is written or the request settles unanswered.</text>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


async def main() -> None:
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "ghost-and-retry.svg")
    sink = OtlpSink().start()
    try:
        spans = await ghost_and_retry(sink)
    finally:
        sink.stop()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(svg(spans))
    print(f"wrote {target}")


if __name__ == "__main__":
    anyio.run(main)
