"""The web view on real parts: real frames of the clip read by a real Triton, a real
aiohttp server, aiortc peer connections and a real headless Chromium.

Most tests serve :class:`ClipView`, a small ``ViewSource`` over a recording made
once per module: frames of yard_cam.ts, the plates Triton reads in them, the
tracker's labels and the events the pass detector reports. The browser test runs
the whole service on the clip.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import shutil
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import aioice.ice
import av
import cv2
import numpy as np
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from converters import assets
from converters.paths import PROJECT_ROOT
from streamer.app import Service
from streamer.config.schema import WebConfig, load_config
from streamer.delivery.events import PlateEvent, build_event
from streamer.domain.frames import Frame, FrameResult
from streamer.inference.client import PlateRecognizer
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.tracking.passes import PassDetector, PassParams
from streamer.web import WebSecurityError, WebServer
from streamer.web.overlay import CONFIRMED_COLOR, render
from streamer.web.view_source import CameraStatus, Snapshot

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
#: Frames of the clip recorded: the parked car's plate in all, the passing car's in 10 and 15.
RECORDED_FRAMES = (10, 15, 30, 45)
ARTIFACTS = PROJECT_ROOT / "test-output" / "test_web"
TOKEN = "t0k3n-Zq8v1LrX4mWc9pBs"


# --------------------------------------------------------------------------- the source


@dataclass(frozen=True)
class Recording:
    snapshots: tuple[Snapshot, ...]
    events: tuple[PlateEvent, ...]


def _record(triton_url: str) -> Recording:
    async def record() -> Recording:
        recognizer = PlateRecognizer(triton_url, request_timeout_s=60)
        await recognizer.start()
        try:
            await recognizer.wait_ready(30)
            detector = PassDetector("yard", passes=PassParams(max_delay_s=60))
            snapshots, passes = [], []
            with av.open(str(CLIP)) as container:
                for index, decoded in enumerate(container.decode(video=0)):
                    if index > max(RECORDED_FRAMES):
                        break
                    if index not in RECORDED_FRAMES:
                        continue
                    image = decoded.to_ndarray(format="bgr24")
                    frame = Frame(
                        "yard", index, float(decoded.time), time.time(), time.monotonic(), image
                    )
                    result = FrameResult(frame, await recognizer.recognise(frame))
                    passes += detector.update(result)
                    snapshots.append(Snapshot(frame, detector.last_tracked))
            passes += detector.flush()
            # Each pass three times over (three vehicle passes' worth of events), so that
            # there is something to page through.
            events = [await build_event(p, 90) for _ in range(3) for p in passes]
            return Recording(tuple(snapshots), tuple(events))
        finally:
            await recognizer.close()

    # Its own thread and loop: the tests' loops belong to pytest-asyncio.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, record()).result()


@pytest.fixture(scope="module")
def recording(triton_server: EmbeddedTriton) -> Recording:
    return _record(triton_server.grpc_url)


class ClipView:
    """A ``ViewSource`` replaying the recording: camera ``yard`` shows the recorded
    snapshots in turn, ``rate`` per second; camera ``gate-2`` is reconnecting and has
    no frame yet."""

    def __init__(self, recording: Recording, rate: float = 4.0) -> None:
        self.recording = recording
        self.rate = rate
        self._t0 = time.monotonic()

    def camera_status(self) -> list[CameraStatus]:
        return [
            CameraStatus("yard", "connected", str(CLIP), 15.0, 5.0, None, 120, 40, 2, 1920, 1080),
            CameraStatus(
                "gate-2",
                "reconnecting",
                "rtsp://***:***@gate.example/stream",
                0.0,
                5.0,
                "connection refused",
                0,
                0,
                0,
                None,
                None,
            ),
        ]

    def snapshot(self, camera: str) -> Snapshot | None:
        if camera != "yard":
            return None
        snapshots = self.recording.snapshots
        return snapshots[int((time.monotonic() - self._t0) * self.rate) % len(snapshots)]

    def recent_events(self) -> list[PlateEvent]:
        return list(self.recording.events)

    def event(self, event_id: str) -> PlateEvent | None:
        return next((e for e in self.recording.events if e.event_id == event_id), None)


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


def _url(web: WebServer, path: str, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{web.port}{path}"


def _decode_jpeg(data: bytes) -> np.ndarray:
    assert data[:2] == b"\xff\xd8" and data[-2:] == b"\xff\xd9"
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    return image


async def _eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll ``check`` until it holds (bounded wait for things to settle), else fail."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not true after {timeout_s} s")
        await asyncio.sleep(0.05)


# --------------------------------------------------------------------------- page and REST


async def test_page_and_camera_api(server: WebServer, http: aiohttp.ClientSession) -> None:
    async with http.get(_url(server, "/")) as response:
        assert response.status == 200
        assert response.content_type == "text/html"
        html = await response.text()
        csp = response.headers["Content-Security-Policy"]
    nonce = re.search(r"script-src 'nonce-([^']+)'", csp)
    assert nonce and f'<script nonce="{nonce.group(1)}">' in html
    assert "RTCPeerConnection" in html and "iceGatheringState" in html

    async with http.get(_url(server, "/api/cameras")) as response:
        assert response.status == 200
        assert response.headers["Cache-Control"] == "no-store"
        cameras = {c["name"]: c for c in await response.json()}
    assert set(cameras) == {"yard", "gate-2"}
    yard, gate = cameras["yard"], cameras["gate-2"]
    assert (yard["state"], yard["decode_fps"], yard["sample_fps"]) == ("connected", 15.0, 5.0)
    assert (yard["width"], yard["height"], yard["last_error"]) == (1920, 1080, None)
    assert yard["snapshot_url"] == "/api/cameras/yard/snapshot.jpg"
    assert yard["mjpeg_url"] == "/api/cameras/yard/mjpeg"
    assert yard["viewers"] == 0
    texts = {p["text"] for p in yard["plates"]}
    assert texts & {"O567AM76", "C567AM76"}, yard["plates"]
    for plate in yard["plates"]:
        x1, y1, x2, y2 = plate["box"]
        assert 0 <= x1 < x2 <= 1920 and 0 <= y1 < y2 <= 1080
    assert gate["state"] == "reconnecting" and gate["last_error"] == "connection refused"
    assert gate["plates"] == [] and gate["url"] == "rtsp://***:***@gate.example/stream"

    async with http.get(_url(server, "/api/cameras/gate-2")) as response:
        assert response.status == 200
        assert (await response.json())["name"] == "gate-2"
    async with http.get(_url(server, "/api/cameras/gate-2/snapshot.jpg")) as response:
        assert response.status == 503  # nothing recognised yet
        assert response.headers["Retry-After"] == "1"


async def test_events_newest_first_paginated_with_crop_urls(
    server: WebServer, http: aiohttp.ClientSession, recording: Recording
) -> None:
    newest_first = recording.events[::-1]
    assert len(newest_first) >= 3
    async with http.get(_url(server, "/api/events?offset=1&limit=2")) as response:
        assert response.status == 200
        page = await response.json()
    assert (page["total"], page["offset"], page["limit"]) == (len(newest_first), 1, 2)
    assert [e["event_id"] for e in page["events"]] == [e.event_id for e in newest_first[1:3]]
    for item in page["events"]:
        assert "crop_jpeg_base64" not in item
        assert item["text"] in ("O567AM76", "Y836XH76") and item["camera"] == "yard"
        assert item["crop_url"] == f"/api/events/{item['event_id']}/crop.jpg"
        async with http.get(_url(server, item["crop_url"])) as response:
            assert response.status == 200 and response.content_type == "image/jpeg"
            crop = await response.read()
        event = next(e for e in recording.events if e.event_id == item["event_id"])
        assert crop == event.crop_jpeg
        _decode_jpeg(crop)
    async with http.get(_url(server, "/api/events")) as response:
        assert len((await response.json())["events"]) == len(newest_first)
    for query in ("limit=0", "limit=201", "offset=-1", "limit=x", "offset=1e3", "limit=²"):
        async with http.get(_url(server, f"/api/events?{query}")) as response:
            assert response.status == 400, query


@pytest.mark.parametrize(
    "path",
    [
        "/api/events/..%2F..%2Fetc%2Fpasswd/crop.jpg",
        "/api/events/../../etc/passwd/crop.jpg",
        "/api/events/%2e%2e%2f%2e%2e%2fetc%2fpasswd/crop.jpg",
        "/api/events/00000000-0000-0000-0000-000000000000/crop.jpg",
        "/api/events/00000000-0000-0000-0000-00000000000G/crop.jpg",
        "/api/events/%00/crop.jpg",
        "/api/cameras/..",
        "/api/cameras/..%2F..%2Fetc%2Fpasswd/snapshot.jpg",
        "/api/cameras/%2e%2e/snapshot.jpg",
        "/api/cameras/Yard/snapshot.jpg",
        "/api/cameras/yard%00/snapshot.jpg",
        "/api/cameras/-yard/mjpeg",
        "/api/cameras/" + "a" * 64 + "/mjpeg",
        "/api/cameras/nope/snapshot.jpg",
        "/api/cameras/yard%2F..%2F..%2Fetc/snapshot.jpg",
    ],
)
async def test_no_path_traversal_or_odd_names(
    server: WebServer, http: aiohttp.ClientSession, path: str
) -> None:
    async with http.get(_url(server, path)) as response:
        assert response.status == 404, path
        body = await response.read()
    assert b"passwd" not in body and b"root:" not in body


# --------------------------------------------------------------------------- snapshot, MJPEG


async def test_snapshot_is_a_jpeg_with_the_overlay(
    server: WebServer, http: aiohttp.ClientSession, recording: Recording
) -> None:
    async with http.get(_url(server, "/api/cameras/yard/snapshot.jpg")) as response:
        assert response.status == 200 and response.content_type == "image/jpeg"
        index = int(response.headers["X-Frame-Index"])
        served = _decode_jpeg(await response.read()).astype(np.int16)
    snapshot = next(s for s in recording.snapshots if s.frame.index == index)
    assert snapshot.plates
    raw = cv2.resize(snapshot.frame.image, (1280, 720), interpolation=cv2.INTER_AREA)
    overlay = np.any(render(snapshot) != raw, axis=2)  # where the boxes and labels are
    assert served.shape == raw.shape
    difference = np.abs(served - raw.astype(np.int16)).max(axis=2)
    assert overlay.sum() > 500
    assert difference[overlay].mean() > 60  # the overlay is there...
    assert difference[~overlay].mean() < 6  # ...and the rest is the frame (JPEG noise)


async def test_mjpeg_parts_are_jpegs_and_a_leaving_client_releases_the_camera(
    server: WebServer, http: aiohttp.ClientSession
) -> None:
    async with http.get(_url(server, "/api/cameras/yard/mjpeg")) as response:
        assert response.status == 200
        content_type = response.headers["Content-Type"]
        assert content_type.startswith("multipart/x-mixed-replace; boundary=")
        boundary = content_type.split("boundary=", 1)[1].encode()
        parts: list[np.ndarray] = []
        while len(parts) < 4:
            line = await asyncio.wait_for(response.content.readline(), 10)
            assert line == b"--" + boundary + b"\r\n", line
            headers = {}
            while (line := await response.content.readline()) != b"\r\n":
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            assert headers["content-type"] == "image/jpeg"
            data = await response.content.readexactly(int(headers["content-length"]))
            assert await response.content.readexactly(2) == b"\r\n"
            parts.append(_decode_jpeg(data))
        assert server.viewers("yard") == 1 and server.producing("yard")
    assert all(part.shape == (720, 1280, 3) for part in parts)
    # Annotated: the confirmed track's green is in the parts.
    green = [np.all(np.abs(p.astype(int) - CONFIRMED_COLOR) < 40, axis=2).sum() for p in parts]
    assert max(green) > 300, green
    # The client has gone: the stream notices within a frame interval or a keep-alive.
    await _eventually(lambda: not server.producing("yard") and server.viewers() == 0)


# --------------------------------------------------------------------------- WebRTC


async def _offer(pc: RTCPeerConnection) -> dict[str, str]:
    await pc.setLocalDescription(await pc.createOffer())  # returns once ICE gathering is done
    return {"sdp": pc.localDescription.sdp, "type": pc.localDescription.type}


async def _watch(
    http: aiohttp.ClientSession, url: str, *, frames: int = 1
) -> tuple[RTCPeerConnection, list[av.VideoFrame]]:
    """An aiortc viewer: offer, answer, connect, and ``frames`` decoded frames."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    try:
        pc.addTransceiver("video", direction="recvonly")
        tracks: asyncio.Queue[Any] = asyncio.Queue()
        pc.on("track", tracks.put_nowait)
        async with http.post(url, json=await _offer(pc)) as response:
            assert response.status == 200, await response.text()
            answer = await response.json()
        await pc.setRemoteDescription(RTCSessionDescription(**answer))
        track = await asyncio.wait_for(tracks.get(), 10)
        received = [await asyncio.wait_for(track.recv(), 10) for _ in range(frames)]
        return pc, received
    except BaseException:
        await pc.close()
        raise


def _counts() -> tuple[int, int]:
    return len(asyncio.all_tasks()), threading.active_count()


async def _fill_default_executor() -> None:
    """Start every worker thread of the default executor, so that its (bounded,
    never shrinking) pool is not mistaken for growth."""
    workers = min(32, (os.cpu_count() or 1) + 4)
    await asyncio.gather(*(asyncio.to_thread(time.sleep, 0.2) for _ in range(workers)))


async def test_webrtc_viewers_share_one_producer_and_release_it(
    server: WebServer, http: aiohttp.ClientSession, loopback_ice: None
) -> None:
    url = _url(server, "/api/cameras/yard/webrtc")
    viewers = [await _watch(http, url, frames=3) for _ in range(3)]
    for _, frames in viewers:
        assert [(f.width, f.height) for f in frames] == [(1280, 720)] * 3
    assert len(server.peer_connections) == 3 and server.viewers("yard") == 3
    feed = server._feeds["yard"]
    assert feed.webrtc_viewers == 3 and feed._producer is not None  # one producer for all
    # With three viewers the pace is lower than with one.
    assert feed.interval() > 1 / server.pace.max_fps
    for pc, _ in viewers:
        await pc.close()
    await _eventually(lambda: not server.peer_connections and not server.producing("yard"))


async def test_100_connect_disconnect_cycles_leak_nothing(
    server: WebServer, http: aiohttp.ClientSession, loopback_ice: None
) -> None:
    url = _url(server, "/api/cameras/yard/webrtc")
    await _fill_default_executor()
    for _ in range(2):  # warm-up: lazily created, long-lived things exist from here on
        pc, _ = await _watch(http, url)
        await pc.close()
    await _eventually(lambda: not server.peer_connections and not server.producing("yard"))
    tasks, threads = _counts()

    for cycle in range(100):
        pc, frames = await _watch(http, url)
        assert frames[0].width == 1280, cycle
        assert len(server.peer_connections) == 1
        await pc.close()
    # Bounded wait for the last closes to settle, then exact counts.
    try:
        await _eventually(
            lambda: (
                not server.peer_connections
                and not server.producing("yard")
                and _counts() == (tasks, threads)
            )
        )
    finally:
        assert len(server.peer_connections) == 0
        assert not server.producing("yard") and server.viewers() == 0
        assert _counts() == (tasks, threads), [t.get_name() for t in asyncio.all_tasks()]


async def test_stop_closes_every_peer_connection_and_is_idempotent(
    recording: Recording, http: aiohttp.ClientSession, loopback_ice: None
) -> None:
    await _fill_default_executor()
    tasks, threads = _counts()
    web = WebServer(ClipView(recording), WebConfig(port=0))
    await web.start()
    clients = [await _watch(http, _url(web, "/api/cameras/yard/webrtc")) for _ in range(2)]
    async with http.get(_url(web, "/api/cameras/yard/mjpeg")) as mjpeg:
        await mjpeg.content.readline()
        assert len(web.peer_connections) == 2 and web.viewers("yard") == 3
        await asyncio.gather(web.stop(), web.stop())
        assert not web.peer_connections and web.viewers() == 0 and not web.producing("yard")
    await web.stop()
    # The server closed the connections: the clients are told (DTLS close), not left waiting.
    await _eventually(lambda: all(pc.connectionState == "closed" for pc, _ in clients))
    await http.close()
    await _eventually(lambda: _counts() == (tasks, threads))


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b'{"sdp": "v=0\\r\\n", "type": "offer"}', "application/json", 400),
        (b'{"sdp": "", "type": "offer"}', "application/json", 400),
        (b'{"sdp": "x", "type": "answer"}', "application/json", 400),
        (b"[1, 2]", "application/json", 400),
        (b"not json", "application/json", 400),
        (b'{"sdp": "x", "type": "offer"}', "text/plain", 415),
    ],
)
async def test_bad_offers_are_refused_and_leave_nothing(
    server: WebServer, http: aiohttp.ClientSession, body: bytes, content_type: str, status: int
) -> None:
    async with http.post(
        _url(server, "/api/cameras/yard/webrtc"), data=body, headers={"Content-Type": content_type}
    ) as response:
        assert response.status == status
    await _eventually(lambda: not server.peer_connections and not server.producing("yard"))


# --------------------------------------------------------------------------- security


async def test_off_loopback_a_token_is_required(
    recording: Recording, http: aiohttp.ClientSession, loopback_ice: None
) -> None:
    # The config refuses it (a ConfigError naming web.token) ...
    with pytest.raises(ValueError, match=r"web\.token is required"):
        WebConfig(host="127.0.0.2", port=0)
    # ... and so does the server itself, given an unchecked config.
    unchecked = WebConfig.model_construct(host="127.0.0.2", port=0, token=None, enabled=True)
    with pytest.raises(WebSecurityError, match=r"web\.token"):
        await WebServer(ClipView(recording), unchecked).start()

    web = WebServer(ClipView(recording), WebConfig(host="127.0.0.2", port=0, token=TOKEN))
    await web.start()
    try:
        event_id = recording.events[0].event_id
        paths = [
            "/",
            "/api/cameras",
            "/api/cameras/yard",
            "/api/events",
            f"/api/events/{event_id}/crop.jpg",
            "/api/cameras/yard/snapshot.jpg",
        ]
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        for path in paths:
            url = _url(web, path, host="127.0.0.2")
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                async with http.get(url, headers=headers) as response:
                    assert response.status == 401, (path, headers)
                    assert TOKEN not in await response.text()
            async with http.get(url + "?token=wrong") as response:
                assert response.status == 401, path
            async with http.get(url, headers=bearer) as response:
                assert response.status == 200, path
                assert TOKEN.encode() not in await response.read()
            async with http.get(url + f"?token={TOKEN}") as response:
                assert response.status == 200, path
                assert TOKEN.encode() not in await response.read()
        # The streams too.
        mjpeg = _url(web, "/api/cameras/yard/mjpeg", host="127.0.0.2")
        async with http.get(mjpeg) as response:
            assert response.status == 401
        async with http.get(mjpeg + f"?token={TOKEN}") as response:
            assert response.status == 200
            assert (await response.content.readline()).startswith(b"--")
        webrtc = _url(web, "/api/cameras/yard/webrtc", host="127.0.0.2")
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTransceiver("video", direction="recvonly")
        offer = await _offer(pc)
        async with http.post(webrtc, json=offer) as response:
            assert response.status == 401
        async with http.post(webrtc, json=offer, headers=bearer) as response:
            assert response.status == 200
            assert (await response.json())["type"] == "answer"
        await pc.close()
    finally:
        await web.stop()
    assert not web.peer_connections


async def test_without_a_token_only_local_host_names_are_answered(
    server: WebServer, http: aiohttp.ClientSession
) -> None:
    for host in ("localhost", f"LocalHost:{server.port}", f"127.0.0.1:{server.port}"):
        async with http.get(_url(server, "/api/cameras"), headers={"Host": host}) as response:
            assert response.status == 200, host
    for host in ("evil.example", f"evil.example:{server.port}", "192.0.2.1"):
        async with http.get(_url(server, "/api/cameras"), headers={"Host": host}) as response:
            assert response.status == 403, host


# --------------------------------------------------------------------------- the browser


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


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    if not (Path("/usr/bin/chromium").exists() and Path("/usr/bin/chromedriver").exists()):
        pytest.fail("Chromium is not installed: run `make test` (apt: chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=DriverService("/usr/bin/chromedriver"), options=options)
    driver.set_script_timeout(10)
    try:
        yield driver
    finally:
        driver.quit()


async def _web_of(service: Service, runner: asyncio.Task[int]) -> tuple[WebServer, bool]:
    """The running service's web server, and whether the test started it itself.

    Until the service starts its own (``service.web``), the test starts one on it.
    """
    await _eventually(lambda: bool(service.cameras) or runner.done(), 120)
    assert not runner.done(), runner.exception()
    web = getattr(service, "web", None)
    if web is not None:
        await _eventually(lambda: web.port is not None, 30)
        return web, False
    web = WebServer(service, service.settings.web)
    await web.start()
    return web, True


FRAMES_DECODED_JS = """
const done = arguments[arguments.length - 1];
const pc = (window.lprPeers || {})[arguments[0]];
if (!pc) { done(-1); return; }
pc.getStats().then((stats) => {
  let decoded = 0;
  stats.forEach((r) => {
    if (r.type === "inbound-rtp" && r.kind === "video") decoded = r.framesDecoded || 0;
  });
  done(decoded);
}).catch(() => done(-2));
"""

VIDEO_RECT_JS = """
const video = document.getElementById("video-" + arguments[0]);
if (!video) return null;
const r = video.getBoundingClientRect();
return [r.left, r.top, r.width, r.height, window.devicePixelRatio, video.videoWidth];
"""


async def test_chromium_plays_the_annotated_live_view(
    tmp_path: Path, triton_server: EmbeddedTriton, chromium: Any, loopback_ice: None
) -> None:
    config = tmp_path / "web.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 2, realtime: true}}\n"
        f"triton: {{url: '{triton_server.grpc_url}', max_in_flight_per_camera: 1}}\n"
        "events: {stdout: false}\n"
        "metrics: {port: 0}\n"
        "web: {port: 0}\n"
    )
    service = Service(load_config(config))
    runner = asyncio.create_task(service.run())
    own_web: WebServer | None = None
    try:
        web, started_here = await _web_of(service, runner)
        own_web = web if started_here else None

        def js(script: str, *args: Any) -> Callable[[], Any]:
            return lambda: chromium.execute_script(script, *args)

        async def until(script: str, check: Callable[[Any], bool], timeout_s: float) -> Any:
            deadline = time.monotonic() + timeout_s
            while True:
                value = await asyncio.to_thread(js(script, "yard"))
                if check(value):
                    return value
                assert time.monotonic() < deadline, f"timed out; last value {value!r}"
                await asyncio.sleep(0.25)

        await asyncio.to_thread(chromium.get, _url(web, "/"))
        await until(
            "const v = document.getElementById('video-' + arguments[0]); "
            "return v ? v.videoWidth : 0;",
            lambda width: width > 0,
            60,
        )
        first = await asyncio.to_thread(
            lambda: chromium.execute_async_script(FRAMES_DECODED_JS, "yard")
        )
        decoded = first
        deadline = time.monotonic() + 30
        while decoded <= first:
            assert time.monotonic() < deadline, f"framesDecoded stuck at {decoded}"
            await asyncio.sleep(0.5)
            decoded = await asyncio.to_thread(
                lambda: chromium.execute_async_script(FRAMES_DECODED_JS, "yard")
            )
        assert first >= 1 and decoded > first, (first, decoded)

        # The caption under the video lists the overlay's labels; once it names the
        # parked car's track, the screenshot must show its green box and label.
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        screenshot = tmp_path / "chromium_live_view.png"
        deadline = time.monotonic() + 60
        while True:
            caption = await asyncio.to_thread(
                js("return document.getElementById('labels-yard').textContent;")
            )
            if re.search(r"\bO567AM76 #\d+", caption or ""):
                png = await asyncio.to_thread(chromium.get_screenshot_as_png)
                left, top, width, height, ratio, video_width = await asyncio.to_thread(
                    js(VIDEO_RECT_JS, "yard")
                )
                image = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
                x0, y0 = round(left * ratio), round(top * ratio)
                area = image[y0 : y0 + round(height * ratio), x0 : x0 + round(width * ratio)]
                b, g, r = (area[..., i].astype(int) for i in range(3))
                green = int(((g > 180) & (b < 100) & (r < 100)).sum())
                if green > 300:
                    break
            assert time.monotonic() < deadline, f"no annotated O567AM76 shown; caption {caption!r}"
            await asyncio.sleep(0.5)
        screenshot.write_bytes(png)
        shutil.copy(screenshot, ARTIFACTS / screenshot.name)
        assert video_width == 1280 and area.shape[0] > 300 and area.shape[1] > 500
        # That green is the overlay's: the clip has none.
        with av.open(str(CLIP)) as container:
            raw = next(container.decode(video=0)).to_ndarray(format="bgr24")
        b, g, r = (raw[..., i].astype(int) for i in range(3))
        assert int(((g > 180) & (b < 100) & (r < 100)).sum()) == 0
    finally:
        if own_web is not None:
            await own_web.stop()
        service.request_stop()
        await asyncio.wait_for(runner, 120)
    assert runner.result() == 0
