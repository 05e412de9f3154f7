# Hooks reach into SDK internals that change between minor releases, so the
# range names only the minors that have been read and tested.
_instruments = ("mcp >= 1.12.3, < 2.4",)

# Optional: standalone FastMCP is hooked too when its `fastmcp` package is importable within this range (both
# ends are tested in CI), whichever distribution provides it: `fastmcp`, or `fastmcp-slim` (published since
# 3.3.0; `fastmcp` 4.x is a meta-package over it). Outside the range, its requests are still traced through
# the SDK, without FastMCP's details.
_instruments_fastmcp_any = ("fastmcp >= 2.14.0, < 4.3", "fastmcp-slim >= 3.3.0, < 4.3")

_supports_metrics = True

# The package of FastMCP 4's task engine (the 2026-07-28 tasks extension); FastMCP 2.x's and 3.x's are their own.
TASKS_EXTENSION = "fastmcp_tasks"
