# Hooks reach into SDK internals that change between minor releases, so the
# range names only the minors that have been read and tested.
_instruments = ("mcp >= 1.12.3, < 2.4",)

_supports_metrics = True
