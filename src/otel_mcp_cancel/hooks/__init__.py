"""Where the plugin hooks in: one module per framework and SDK line, each thin, reporting what it saw.

What a request's outcome is, and what is recorded, is decided elsewhere (`outcome`, `request_telemetry`):
- `server_v1`, `server_v2`: the MCP SDK's server, mcp 1.x and 2.x (its own FastMCP/MCPServer included);
- `client_v1`, `client_v2`, `client_transports`: the SDK's client;
- `fastmcp_server`: standalone FastMCP (PyPI `fastmcp` 2.x to 4.x), over either line;
- `observations`: what these share; `wrapping`: applying and removing wrappers.
"""
