"""`subscriptions/listen` (the 2026-07-28 revision, served by mcp 2.3's MCPServer): one request that lives as long
as its caller keeps the subscription open. Its caller closing it, by a cancel or by ending the connection, is its
normal end: its span lasts the subscription and ends UNSET with no error, no cancel event and no ghost, and no
point of `mcp.server.operation.duration` is recorded for it, so a subscription never reads as a slow call or a
caller's cancel in the operation metrics."""

from __future__ import annotations

import anyio
import pytest
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY
from opentelemetry.trace import StatusCode

from tests.raw_peer import RawPeer, served_in_memory
from tests.servers import Gates, notes_server
from tests.support import until

pytestmark = pytest.mark.anyio

ENVELOPE = {"_meta": {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_CAPABILITIES_META_KEY: {}}}
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"


@pytest.mark.parametrize("closed_by", ["cancel", "connection"])
async def test_a_subscription_its_caller_closes_ended_normally_and_is_no_operation_point(
    captured, closed_by: str
) -> None:
    async with served_in_memory(notes_server(Gates())) as (read_stream, write_stream):
        async with anyio.create_task_group() as tg:
            peer = RawPeer(read_stream, write_stream)
            tg.start_soon(peer.pump)
            await peer.request(1, "subscriptions/listen", {**ENVELOPE, "notifications": {"toolsListChanged": True}})
            await until(lambda: any(getattr(message, "method", None) == ACKNOWLEDGED for message in peer.wire))
            if closed_by == "cancel":
                await peer.cancel(1, "done listening")
            assert not (await peer.call(2, "tools/list", ENVELOPE)).result.get("isError")  # served meanwhile
            tg.cancel_scope.cancel()
    await until(lambda: any(span.name == "subscriptions/listen" for span in captured.server_spans()))
    span = captured.server_span("subscriptions/listen")
    assert dict(span.attributes) == {"mcp.method.name": "subscriptions/listen", "jsonrpc.request.id": "1",
                                     "mcp.protocol.version": "2026-07-28"}
    assert [event.name for event in span.events] == [] and span.status.status_code is StatusCode.UNSET
    points = captured.points("mcp.server.operation.duration")
    assert sorted(point.attributes["mcp.method.name"] for point in points) == ["tools/list"]
    assert captured.points("tool.ghost_responses") == []
