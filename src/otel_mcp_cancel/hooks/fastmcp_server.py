"""Hooks into standalone FastMCP (PyPI `fastmcp`: 2.x and 3.x on mcp 1.x, 4.x on mcp 2.x).

FastMCP serves through the SDK's low-level server, so the SDK line's hooks open, answer and end each
request's span. These add what only FastMCP knows:
- where it runs the user's code: the tool, resource or prompt it found in its own registry. Entered,
  the tool is registered (its annotations give a ghost its risk, on the first call, even for tools of
  mounted servers); returned, the side effects are done, however FastMCP goes on after (a checkpoint
  there, on 2.x, would otherwise hide a ghost);
- 3.x and 4.x: the SERVER span FastMCP opens itself is ours, lent, and its client's CLIENT span is
  held for the request it is sent for (see `fastmcp_spans`);
- 2.x and 3.x (on mcp 1.x): a session's serving loop, which FastMCP runs itself.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import get_tracer

from otel_mcp_cancel.faults import contained
from otel_mcp_cancel.hooks import client_transports, sdk_fastmcp, sdk_v1, sdk_v2
from otel_mcp_cancel.hooks.capabilities import SESSIONS, TOOL_ENDS
from otel_mcp_cancel.hooks.fastmcp_spans import FASTMCP_SCOPE, fastmcp_tracer
from otel_mcp_cancel.hooks.framework import FrameworkHooks
from otel_mcp_cancel.hooks.observations import HookSet, arg, observed
from otel_mcp_cancel.hooks.reach import Reach
from otel_mcp_cancel.hooks.wrapping import Hook
from otel_mcp_cancel.request_state import current_record

# Where FastMCP 3.x/4.x bind the SDK's transport helpers by name: imported before instrument(), they would
# keep the unhooked ones.
FASTMCP_TRANSPORT_BINDINGS = (
    "fastmcp.client.transports.stdio",
    "fastmcp.client.transports.http",
    "fastmcp.client.transports.sse",
)


class _LendsSpans:
    """Hooks FastMCP's `get_tracer` where it is bound (see `fastmcp_spans`)."""

    active: bool
    _telemetry: Any

    def __init__(self, telemetry: Any) -> None:
        super().__init__(telemetry)  # type: ignore[call-arg]  # a mixin: the hook set's own __init__ is next
        self._given_tracers: dict[str | None, Any] = {}  # by FastMCP's version: asked for as each span opens

    def tracer(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        tracer = wrapped(*args, **kwargs)
        if self.active:
            with contained("giving FastMCP its tracer"):
                return fastmcp_tracer(tracer, self._telemetry.tracer, self._given(args[0] if args else
                                                                                  kwargs.get("version")))
        return tracer

    def _given(self, version: str | None) -> Any:
        """FastMCP's tracer from the provider given to instrument(), or None when none was."""
        provider = self._telemetry.tracer_provider
        if provider is None:
            return None
        if version not in self._given_tracers:
            self._given_tracers[version] = get_tracer(FASTMCP_SCOPE, version, provider)
        return self._given_tracers[version]


class FastMCPServerHooks(_LendsSpans, FrameworkHooks):
    def __init__(self, telemetry: Any, major: int) -> None:
        super().__init__(telemetry)
        self._major = major
        self.sdk = sdk_v2 if major >= 4 else sdk_v1  # the SDK line FastMCP's major runs on
        if telemetry is not None:
            telemetry.registries.append(self.registered_tool)

    def reaches(self) -> list[Reach]:
        return [self.sdk.stdio_stdout, self.sdk.stdio_stdin, *sdk_fastmcp.registry(self._major)]

    def registered_tool(self, lowlevel_server: Any, name: str) -> Any:
        """The local tool of that name of the FastMCP behind a low-level server, or None: read from its own
        dicts, for a call cancelled before FastMCP ran (or even found) its tool, or handed to its task
        engine. Tools of mounted servers are known once they ran or were listed."""
        reference = sdk_fastmcp.server_of(lowlevel_server)
        server = reference() if callable(reference) else None
        if server is None:
            return None
        if self._major == 2:
            return sdk_fastmcp.manager_tools(sdk_fastmcp.tool_manager(server), {}).get(name)
        provider = sdk_fastmcp.local_provider(server)
        components = list(sdk_fastmcp.provider_components(provider, {}).items())  # keyed "tool:<name>@<version>"
        return next((tool for key, tool in components if key.startswith("tool:") and tool.name == name), None)

    def hooks(self) -> list[Hook]:
        # FastMCP imports the SDK's `stdio_server` by name: each binding is wrapped, for network.transport.
        stdio = "fastmcp.server.server" if self._major == 2 else "fastmcp.server.mixins.transport"
        hooks = [self.stdio_hook(stdio), *self._component_hooks()]
        if self._major < 4:  # on mcp 1.x FastMCP serves a session with its own `run`, not the SDK's
            hooks.append(Hook("fastmcp.server.low_level", "LowLevelServer.run", self.session_run, SESSIONS,
                              ("read_stream",)))
        return hooks

    def _component_hooks(self) -> list[Hook]:
        if self._major == 2:  # one manager per kind runs every local component, by key
            return [
                Hook("fastmcp.tools.tool_manager", "ToolManager.call_tool", self._manager_call_tool, TOOL_ENDS,
                     ("key",)),
                Hook("fastmcp.resources.resource_manager", "ResourceManager.read_resource", self.user_function,
                     "how a FastMCP resource's function ended (ghosts of resource reads)"),
                Hook("fastmcp.prompts.prompt_manager", "PromptManager.render_prompt", self.user_function,
                     "how a FastMCP prompt's function ended (ghosts of prompts)"),
            ]
        return [  # the server calls each component's entry point; a mounted server's overrides it to delegate
            Hook("fastmcp.tools.base", "Tool._run", self.tool_run, TOOL_ENDS),
            Hook("fastmcp.resources.base", "Resource._read", self.user_function,
                 "how a FastMCP resource's function ended (ghosts of resource reads)"),
            Hook("fastmcp.resources.template", "ResourceTemplate._read", self.user_function,
                 "how a FastMCP resource template's function ended (ghosts of resource reads)"),
            Hook("fastmcp.prompts.base", "Prompt._render", self.user_function,
                 "how a FastMCP prompt's function ended (ghosts of prompts)"),
            Hook("fastmcp.server.telemetry", "get_tracer", self.tracer,
                 "FastMCP's own server spans, under ours and on the providers given to instrument()"),
        ]

    async def _manager_call_tool(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """FastMCP 2.x: the manager runs the tool registered under `key`, if any (a dict it keeps)."""
        record = current_record.get()()
        if not self.active or record is None:
            return await wrapped(*args, **kwargs)
        with contained("reading FastMCP's tool registry"):
            tool = sdk_fastmcp.manager_tools(instance, {}).get(arg(args, kwargs, 0, "key"))
            if tool is not None:
                record.tool_registered = True
                record.registered_annotations = tool.annotations
        # The exception it raised, if any, is noted: FastMCP turns it into an isError result.
        return await observed(record.note_handler, wrapped, args, kwargs, record.note_exception)


class FastMCPClientHooks(_LendsSpans, HookSet):
    """FastMCP 3.x/4.x's client spans are held for the requests they are sent for (see `fastmcp_spans`); 2.x
    makes none. The requests themselves go through the SDK's client session, which the SDK line's hooks
    trace; FastMCP's transports bind the SDK's transport helpers by name, each binding hooked too."""

    offers_waiting_spans = True
    finds_current_record = False

    def __init__(self, telemetry: Any, major: int = 4) -> None:
        super().__init__(telemetry)
        self.sdk = sdk_v2 if major >= 4 else sdk_v1  # the SDK line FastMCP's major runs on

    def reaches(self) -> list[Reach]:
        return [reach for reach in (self.sdk.http_client_transport,) if reach is not None]

    def hooks(self) -> list[Hook]:
        return [
            Hook("fastmcp.client.telemetry", "get_tracer", self.tracer,
                 "FastMCP's own client spans, carrying our verdict and on the providers given to instrument()"),
            *client_transports.transport_hooks(self._transport, FASTMCP_TRANSPORT_BINDINGS),
        ]

    def _transport(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if not self.active:
            return wrapped(*args, **kwargs)
        return client_transports.remembered(wrapped, args, kwargs, self.sdk.http_client_transport)
