"""MCP servers the tests drive, with tools that record ground truth and wait on events the test sets."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import anyio
from mcp.server.mcpserver import MCPServer


@dataclass
class Gates:
    """Test-controlled synchronisation: a tool says it started, then waits until the test releases it."""

    started: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)
    thread_started: threading.Event = field(default_factory=threading.Event)
    thread_release: threading.Event = field(default_factory=threading.Event)
    side_effects: list[str] = field(default_factory=list)

    def let_go(self) -> None:
        self.release.set()
        self.thread_release.set()


def notes_server(gates: Gates) -> MCPServer:
    server = MCPServer("notes")

    @server.tool()
    def echo(text: str) -> str:
        return text

    @server.tool()
    def broken(text: str) -> str:
        raise ValueError("the tool failed")

    @server.tool()
    async def slow(text: str) -> str:
        gates.started.set()
        await gates.release.wait()
        return text

    @server.tool()
    async def shielded_write(path: str) -> str:
        gates.started.set()
        with anyio.CancelScope(shield=True):
            await gates.release.wait()
            gates.side_effects.append(path)
        return f"wrote {path}"

    @server.tool()
    async def shielded_broken(path: str) -> str:
        gates.started.set()
        with anyio.CancelScope(shield=True):
            await gates.release.wait()
            gates.side_effects.append(path)
        raise ValueError("failed after writing")

    @server.tool()
    def sync_write(path: str) -> str:
        gates.thread_started.set()
        gates.thread_release.wait(30)
        gates.side_effects.append(path)
        return f"wrote {path}"

    @server.resource("notes://{name}")
    async def note(name: str) -> str:
        gates.started.set()
        with anyio.CancelScope(shield=True):
            await gates.release.wait()
        return f"note {name}"

    return server
