"""With nothing to record into, the plugin steps aside: requests pass through untouched, so the host pays
the SDK's own cost and nothing more. Once a provider records (given, or set globally later), they are traced."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.metrics._internal import _ProxyMeter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NoOpTracerProvider

from otel_mcp_cancel.liveness import Recording
from tests.conftest import instrumentation
from tests.raw_peer import served_in_memory
from tests.sdk_client import sdk_client
from tests.servers import Gates, notes_server


async def requests_opened(tracer_provider: Any, meter_provider: Any) -> list[tuple[str, str]]:
    """(side, method) of every request the plugin opened a record for: its request_hook runs for each."""
    opened: list[tuple[str, str]] = []
    hook = lambda span, request: opened.append((request.side, request.method))  # noqa: E731
    with instrumentation(tracer_provider=tracer_provider, meter_provider=meter_provider, request_hook=hook):
        async with sdk_client(served_in_memory(notes_server(Gates()))) as client:
            assert (await client.call_tool("echo", {"text": "a"})).content[0].text == "a"
    return opened


@pytest.mark.anyio
async def test_with_no_op_providers_no_request_is_touched() -> None:
    assert await requests_opened(NoOpTracerProvider(), NoOpMeterProvider()) == []


@pytest.mark.anyio
async def test_with_the_sdk_disabled_no_request_is_touched(monkeypatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert await requests_opened(TracerProvider(), MeterProvider()) == []


@pytest.mark.anyio
async def test_with_recording_providers_every_request_is_traced() -> None:
    opened = await requests_opened(TracerProvider(), MeterProvider())
    assert opened.count(("server", "tools/call")) == 1
    assert opened.count(("client", "tools/call")) == 1


def test_either_signal_recording_is_enough() -> None:
    assert Recording(TracerProvider().get_tracer("t"), NoOpMeterProvider().get_meter("m"))()
    assert Recording(NoOpTracerProvider().get_tracer("t"), MeterProvider().get_meter("m"))()
    assert not Recording(NoOpTracerProvider().get_tracer("t"), NoOpMeterProvider().get_meter("m"))()


def test_a_provider_set_globally_later_is_recorded_into() -> None:
    """No provider given and none set globally yet: the API hands out proxies, which resolve once one is set."""
    proxy = _ProxyMeter("m")
    recording = Recording(NoOpTracerProvider().get_tracer("t"), proxy)
    assert not recording()
    proxy.on_set_meter_provider(MeterProvider())  # what set_meter_provider() does to every proxy meter
    assert recording()
