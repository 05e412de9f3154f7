"""A notes vault served over MCP: a stock MCPServer with no telemetry code in it.

Run it under `opentelemetry-instrument python examples/notes_server.py VAULT_DIR`
and otel-mcp-cancel traces every request with its true outcome.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations

vault = Path(sys.argv[1] if len(sys.argv) > 1 else "vault")
vault.mkdir(parents=True, exist_ok=True)
server = MCPServer("notes-vault")

# Annotations tell otel-mcp-cancel how dangerous a ghost of each tool is (tool.ghost_risk).
READS = ToolAnnotations.model_validate({"readOnlyHint": True})
IDEMPOTENT_WRITE = ToolAnnotations.model_validate({"readOnlyHint": False, "idempotentHint": True})
WRITE = ToolAnnotations.model_validate({"readOnlyHint": False, "idempotentHint": False})


@server.tool(annotations=IDEMPOTENT_WRITE)
async def write_note(name: str, text: str, commit_seconds: float = 0.0) -> str:
    """Save a note. The commit is shielded: once started it always completes, even if the caller gives up."""
    with anyio.CancelScope(shield=True):
        await anyio.sleep(commit_seconds)
        (vault / name).write_text(text)
    return f"saved {name}"


@server.tool(annotations=WRITE)
def append_journal(line: str, seconds: float = 0.0) -> str:
    """A sync tool: it runs in a worker thread, which a cancel cannot interrupt."""
    time.sleep(seconds)
    with (vault / "journal.md").open("a") as journal:
        journal.write(line + "\n")
    return "appended"


@server.tool(annotations=READS)
def read_note(name: str) -> str:
    path = vault / name
    if not path.exists():
        raise FileNotFoundError(f"no note named {name}")
    return path.read_text()


@server.tool(annotations=READS)
async def search_notes(query: str, seconds: float = 0.0) -> list[str]:
    """Slow search; a cancel interrupts it before it answers (no side effects, so no ghost)."""
    await anyio.sleep(seconds)
    return sorted(p.name for p in vault.iterdir() if query in p.read_text())


@server.tool(annotations=READS)
def lint_note(name: str) -> CallToolResult:
    """Returns an isError result (rather than raising) when the note has no title line."""
    text = (vault / name).read_text() if (vault / name).exists() else ""
    if not text.startswith("# "):
        return CallToolResult(content=[TextContent(type="text", text=f"{name} has no title")], is_error=True)
    return CallToolResult(content=[TextContent(type="text", text="ok")])


@server.tool(annotations=WRITE)
def export_vault(destination: str) -> str:
    raise PermissionError(f"cannot write to {destination}")


if __name__ == "__main__":
    server.run()
