"""Every name of standalone FastMCP that the plugin reads besides the callables it wraps, by FastMCP's major: where
it keeps its tools. Probed as hooks apply (`reach`); nothing here imports FastMCP until then."""

from __future__ import annotations

from otel_mcp_cancel.hooks.capabilities import FASTMCP_REGISTRY
from otel_mcp_cancel.hooks.reach import Attribute, Name, Reach

# The FastMCP server behind the SDK's low-level server FastMCP subclasses (a weak reference to it).
server_of = Attribute(FASTMCP_REGISTRY, Name((), "fastmcp.server.low_level", "LowLevelServer"), "_fastmcp_ref")
_FastMCP = Name((), "fastmcp.server.server", "FastMCP")
# 2.x: a manager per kind, its components by key.
tool_manager = Attribute(FASTMCP_REGISTRY, _FastMCP, "_tool_manager")
manager_tools = Attribute(FASTMCP_REGISTRY, Name((), "fastmcp.tools.tool_manager", "ToolManager"), "_tools")
# 3.x and 4.x: a local provider, its components keyed "tool:<name>@<version>".
local_provider = Attribute(FASTMCP_REGISTRY, _FastMCP, "_local_provider")
provider_components = Attribute(FASTMCP_REGISTRY, Name(
    (), "fastmcp.server.providers.local_provider.local_provider", "LocalProvider"), "_components")


def registry(major: int) -> list[Reach]:
    return [server_of, tool_manager, manager_tools] if major == 2 else [server_of, local_provider,
                                                                        provider_components]
