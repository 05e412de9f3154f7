"""Which tool names a server has registered, so unregistered names fold to _OTHER on metrics.

Asked of the server, never of the client: its own schema lookup where it has
one (MCPServer), otherwise the names it advertised in its own tools/list answers.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import Any

# A server's own listing is trusted, but a cap keeps a runaway listing from growing memory.
MAX_LISTED_NAMES = 10_000

_listed: weakref.WeakKeyDictionary[Any, frozenset[str]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def learn_listing(server: Any, result: Any) -> None:
    """Remember the tool names a server's tools/list answer (the wire dict) advertised."""
    tools = result.get("tools") if isinstance(result, Mapping) else None
    if isinstance(tools, list):
        learn_names(server, [tool.get("name") for tool in tools if isinstance(tool, Mapping)])


def learn_names(server: Any, names: list[Any]) -> None:
    with _lock:
        merged = _listed.get(server, frozenset()) | {name for name in names if isinstance(name, str)}
        if len(merged) <= MAX_LISTED_NAMES:
            _listed[server] = merged


def is_registered(server: Any, name: str | None) -> bool:
    if name is None:
        return False
    lookup = getattr(server, "get_tool_input_schema", None)
    if callable(lookup) and lookup(name) is not None:
        return True
    with _lock:
        return name in _listed.get(server, frozenset())
