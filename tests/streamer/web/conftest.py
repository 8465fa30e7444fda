"""Fixtures of the web tests: the recording (made once for them all), a server on it, an HTTP
client, ICE on the loopback address."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import aioice.ice
import pytest

from streamer.config import WebConfig
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.web import WebServer
from tests.streamer.web.clip_view import ClipView, Recording, record_clip


@pytest.fixture(scope="package")
def recording(triton_server: EmbeddedTriton) -> Recording:
    return record_clip(triton_server.grpc_url)


@pytest.fixture
async def server(recording: Recording) -> AsyncIterator[WebServer]:
    web = WebServer(ClipView(recording), WebConfig(port=0))
    await web.start()
    try:
        yield web
    finally:
        await web.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def loopback_ice(monkeypatch: pytest.MonkeyPatch) -> None:
    """aioice leaves 127.0.0.1 out of its host candidates; these tests have nothing else."""
    monkeypatch.setattr(aioice.ice, "get_host_addresses", lambda use_ipv4, use_ipv6: ["127.0.0.1"])
