# Hooks reach into SDK internals that change between minor releases, so the
# range names only the minors that have been read and tested.
_instruments = ("mcp >= 2.0.0, < 2.4",)

_supports_metrics = True
