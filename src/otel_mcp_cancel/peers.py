"""The peer's name and version, as it names itself: the client's (`clientInfo` of `initialize`, or from 2026-07-28
the `_meta` of each request) on a server's spans, the server's (`serverInfo` of the `initialize` result, or the
`_meta` stamp of a 2026-era result) on a client's. Read as a request is resolved, kept on its session for the
session's later requests.

On the metrics, the peer's name is a dimension an operator can break cancels down by ("which host cancels most"):
bounded, as the first MAX_PEER_NAMES names a side sees keep their value and any later one is _OTHER.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, NamedTuple

from otel_mcp_cancel.attributes import bounded
from otel_mcp_cancel.conventions import (
    CLIENT_INFO_META_KEY,
    INITIALIZE,
    MCP_CLIENT_NAME,
    MCP_CLIENT_VERSION,
    MCP_SERVER_NAME,
    MCP_SERVER_VERSION,
    OTHER,
    SERVER_INFO_META_KEY,
)
from otel_mcp_cancel.messages import is_mapping, message_field

MAX_PEER_NAMES = 32  # distinct peer names on a side's metrics; any later one is _OTHER
_PEERS_CACHED = 256  # peers made once and shared by their requests (names a peer invents only churn it)


class Peer(NamedTuple):
    span_attributes: dict[str, str]  # its name and version, as it sent them (cut to size): never mutate
    metric_attribute: tuple[str, str]  # its name as the metrics carry it: bounded by MAX_PEER_NAMES


class PeerNames:
    """One side's peers: a server's clients, or a client's servers."""

    def __init__(self, name_key: str, version_key: str, info_field: str, meta_key: str) -> None:
        self._name_key, self._version_key = name_key, version_key
        self._info_field, self._meta_key = info_field, meta_key  # where the peer names itself
        self._labels: set[str] = set()
        self._lock = threading.Lock()
        self._peer = functools.lru_cache(maxsize=_PEERS_CACHED)(self._make)

    def named_in(self, method: str, message: Any) -> Peer | None:
        """The peer a message names itself in: the `initialize` request (a server's) or result (a client's), or
        any other whose `_meta` carries it."""
        if message is None:
            return None
        if method == INITIALIZE:
            info = message_field(message, self._info_field)
        else:
            meta = message.get("_meta") if type(message) is dict else message_field(message, "meta")
            info = meta.get(self._meta_key) if meta is not None and (type(meta) is dict or is_mapping(meta)) else None
        if info is None:
            return None
        name, version = message_field(info, "name"), message_field(info, "version")
        if not isinstance(name, str):
            return None
        return self._peer(bounded(name), bounded(version) if isinstance(version, str) and version else None)

    def _make(self, name: str, version: str | None) -> Peer:
        attributes = {self._name_key: name}
        if version is not None:
            attributes[self._version_key] = version
        with self._lock:
            if name not in self._labels and len(self._labels) < MAX_PEER_NAMES:
                self._labels.add(name)
            label = name if name in self._labels else OTHER
        return Peer(attributes, (self._name_key, label))


def clients() -> PeerNames:
    return PeerNames(MCP_CLIENT_NAME, MCP_CLIENT_VERSION, "clientInfo", CLIENT_INFO_META_KEY)


def servers() -> PeerNames:
    return PeerNames(MCP_SERVER_NAME, MCP_SERVER_VERSION, "serverInfo", SERVER_INFO_META_KEY)
