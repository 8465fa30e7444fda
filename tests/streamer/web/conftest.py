"""Fixtures of the web tests: the recording (made once for them all), a server on it, an HTTP
client, ICE on the loopback address, a headless Chromium, and the whole service running on
the clip with a token, a history and a webhook receiver (for the API and the pages)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import aioice.ice
import pytest

from streamer.config import WebConfig
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.web import WebServer
from tests.streamer.web.clip_view import ClipView, Recording, record_clip
from tests.streamer.web.running_service import (
    RunningService,
    clip_service_config,
    running_service,
)
from tests.webhook_receiver import new_secret


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


CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--allow-loopback-in-peer-connection",
    "--disable-features=WebRtcHideLocalIpsWithMdns",
    "--window-size=1280,1000",
    "--autoplay-policy=no-user-gesture-required",
)


@contextlib.contextmanager
def _chromium(profile: Path, *flags: str) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    if not (Path("/usr/bin/chromium").exists() and Path("/usr/bin/chromedriver").exists()):
        pytest.fail("Chromium is not installed: run `make test` (apt: chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console errors
    for flag in (*CHROMIUM_FLAGS, *flags, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=DriverService("/usr/bin/chromedriver"), options=options)
    driver.set_script_timeout(10)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Any]:
    with _chromium(tmp_path / "chromium-profile") as driver:
        yield driver


@pytest.fixture
def chromium_without_udp(tmp_path: Path) -> Iterator[Any]:
    """A Chromium whose WebRTC may not use UDP (as behind a firewall that drops it): with no
    TURN server it cannot connect to the service at all."""
    flag = "--webrtc-ip-handling-policy=disable_non_proxied_udp"  # no UDP candidate at all
    with _chromium(tmp_path / "chromium-profile", flag) as driver:
        yield driver


@pytest.fixture(scope="package")
def running(
    triton_server: EmbeddedTriton, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningService]:
    """The service on the clip (see :func:`clip_service_config`), once it has delivered the
    clip's two events to its webhook receiver."""
    secret = new_secret()
    config = clip_service_config(triton_server.grpc_url, secret)
    path = tmp_path_factory.mktemp("running") / "site.yaml"
    with running_service(path, config, secret) as service:
        deadline = time.monotonic() + 120
        while len(service.receiver.delivered()) < 2:
            assert time.monotonic() < deadline, "no two webhook deliveries"
            time.sleep(0.1)
        yield service
