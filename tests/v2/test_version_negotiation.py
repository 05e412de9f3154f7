"""Version negotiation is not a server failure. A 2026-07-28 client that proposes a protocol version the server
does not serve is answered -32022 (UNSUPPORTED_PROTOCOL_VERSION) and tries another: the probe is the client's
to make, as invalid params are, so the server's span says `failed` with `error.type=-32022` and leaves its status
UNSET, and a fleet of clients negotiating never paints the server red."""

from __future__ import annotations

import anyio
import pytest
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY, UNSUPPORTED_PROTOCOL_VERSION
from opentelemetry.trace import StatusCode

from tests.raw_peer import RawPeer, served_in_memory
from tests.servers import Gates, notes_server

pytestmark = pytest.mark.anyio


async def test_a_version_the_server_does_not_serve_is_the_callers_probe_not_a_server_failure(captured) -> None:
    envelope = {"_meta": {PROTOCOL_VERSION_META_KEY: "1999-01-01", CLIENT_CAPABILITIES_META_KEY: {}}}
    async with served_in_memory(notes_server(Gates())) as (read_stream, write_stream):
        async with anyio.create_task_group() as tg:
            peer = RawPeer(read_stream, write_stream)
            tg.start_soon(peer.pump)
            answer = await peer.call(1, "tools/list", envelope)
            tg.cancel_scope.cancel()
    assert answer.error.code == UNSUPPORTED_PROTOCOL_VERSION == -32022
    span = captured.server_span("tools/list")
    assert {key: span.attributes.get(key) for key in ("tool.outcome", "error.type", "rpc.response.status_code")} == {
        "tool.outcome": None, "error.type": "-32022", "rpc.response.status_code": "-32022"}
    assert span.status.status_code is StatusCode.UNSET
    (point,) = [p for p in captured.points("mcp.server.operation.duration")
                if p.attributes.get("mcp.method.name") == "tools/list"]
    assert (point.attributes["error.type"], point.count) == ("-32022", 1)
