"""A peer's name and version as it names itself, and the bound on the names a side's metrics carry."""

from __future__ import annotations

from otel_mcp_cancel import peers
from otel_mcp_cancel.conventions import CLIENT_INFO_META_KEY, SERVER_INFO_META_KEY


def test_the_client_names_itself_in_initialize_or_in_each_requests_meta() -> None:
    clients = peers.clients()
    named = clients.named_in("initialize", {"clientInfo": {"name": "claude-code", "version": "2.1"}})
    assert named is not None
    assert named.span_attributes == {"mcp.client.name": "claude-code", "mcp.client.version": "2.1"}
    assert named.metric_attribute == ("mcp.client.name", "claude-code")
    meta = {"_meta": {CLIENT_INFO_META_KEY: {"name": "cursor", "version": ""}}, "name": "echo"}
    per_request = clients.named_in("tools/call", meta)
    assert per_request is not None and per_request.span_attributes == {"mcp.client.name": "cursor"}  # no version
    # Nothing else names it: another request's params, a missing or malformed name.
    assert clients.named_in("tools/call", {"name": "echo", "_meta": {"traceparent": "00-..."}}) is None
    assert clients.named_in("initialize", {"clientInfo": {"name": 7}}) is None
    assert clients.named_in("initialize", None) is None


def test_the_server_names_itself_in_initializes_result_or_a_results_meta() -> None:
    servers = peers.servers()
    named = servers.named_in("initialize", {"serverInfo": {"name": "notes", "version": "1"}, "capabilities": {}})
    assert named is not None and named.span_attributes == {"mcp.server.name": "notes", "mcp.server.version": "1"}
    stamped = servers.named_in("tools/call", {"content": [], "_meta": {SERVER_INFO_META_KEY: {"name": "notes"}}})
    assert stamped is not None and stamped.metric_attribute == ("mcp.server.name", "notes")


def test_names_are_cut_to_size_and_the_metrics_carry_a_bounded_set_of_them() -> None:
    clients = peers.clients()
    huge = clients.named_in("initialize", {"clientInfo": {"name": "x" * 10_000, "version": "y" * 10_000}})
    assert huge is not None and all(len(value) <= 256 for value in huge.span_attributes.values())
    labels = set()
    for n in range(peers.MAX_PEER_NAMES + 20):
        peer = clients.named_in("initialize", {"clientInfo": {"name": f"host-{n}", "version": "1"}})
        assert peer is not None
        assert peer.span_attributes["mcp.client.name"] == f"host-{n}"  # the span keeps what it sent
        labels.add(peer.metric_attribute[1])
    # The huge name took the first place; then 31 hosts keep theirs, and every later one is _OTHER.
    assert labels == {f"host-{n}" for n in range(peers.MAX_PEER_NAMES - 1)} | {"_OTHER"}
    again = clients.named_in("initialize", {"clientInfo": {"name": "host-0", "version": "2"}})
    assert again is not None and again.metric_attribute == ("mcp.client.name", "host-0")
