# Open to the next major: a minor the plugin has not seen is instrumented, each hook checked as it is applied
# (`hooks.wrapping`): a capability whose internals moved is named in one WARNING, and the rest works. CI tests
# the oldest and newest of each line, and the newest releases as they ship.
_instruments = ("mcp >= 1.12.3, < 3",)

# Optional: standalone FastMCP is hooked too when its `fastmcp` package is importable within this range,
# whichever distribution provides it: `fastmcp`, or `fastmcp-slim` (published since 3.3.0; `fastmcp` 4.x is a
# meta-package over it). Outside the range, its requests are still traced through the SDK, without FastMCP's
# details. Not the instrumentation package's `instruments-any`: that makes one of them required, and FastMCP
# is optional.
_instruments_fastmcp_any = ("fastmcp >= 2.14.0, < 5", "fastmcp-slim >= 3.3.0, < 5")

_supports_metrics = True

# The package of FastMCP 4's task engine (the 2026-07-28 tasks extension); FastMCP 2.x's and 3.x's are their own.
TASKS_EXTENSION = "fastmcp_tasks"
