# Hooks reach into SDK internals that change between minor releases, so the
# range names only the minors that have been read and tested.
_instruments = ("mcp >= 1.12.3, < 2.4",)

# Optional: standalone FastMCP is hooked too when it is installed within this range (both ends are
# tested in CI); outside it, its requests are still traced through the SDK, without FastMCP's details.
_instruments_fastmcp = ("fastmcp >= 2.14.0, < 4.3",)

_supports_metrics = True
