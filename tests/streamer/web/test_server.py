"""The web view's page, REST API and snapshots on real parts: real frames of the clip read by
a real Triton (:class:`~tests.streamer.web.clip_view.ClipView`), a real aiohttp server, and a
real headless Chromium that plays the live view of the whole service running on the clip.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import av
import cv2
import numpy as np
import pytest

from converters.paths import PROJECT_ROOT
from streamer.app import Service
from streamer.config import load_config
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.web import WebServer
from streamer.web.overlay import CONFIRMED_COLOR, TENTATIVE_COLOR, render
from tests.streamer.web.clip_view import CLIP, Recording, decode_jpeg, eventually, web_url

ARTIFACTS = PROJECT_ROOT / "test-output" / "test_web"


# --------------------------------------------------------------------------- page and REST


async def test_page_and_camera_api(server: WebServer, http: aiohttp.ClientSession) -> None:
    async with http.get(web_url(server, "/")) as response:
        assert response.status == 200
        assert response.content_type == "text/html"
        html = await response.text()
        csp = response.headers["Content-Security-Policy"]
    # Scripts and styles of this origin only: none inline.
    assert "script-src 'self'" in csp and "style-src 'self'" in csp and "unsafe" not in csp
    assert '<script src="/static/live.js"' in html and "<script>" not in html
    async with http.get(web_url(server, "/static/live.js")) as response:
        assert response.status == 200 and response.content_type == "text/javascript"
        script = await response.text()
    assert "RTCPeerConnection" in script and "iceGatheringState" in script
    async with http.get(web_url(server, "/static/nothing.js")) as response:
        assert response.status == 404

    async with http.get(web_url(server, "/api/cameras")) as response:
        assert response.status == 200
        assert response.headers["Cache-Control"] == "no-store"
        cameras = {c["name"]: c for c in await response.json()}
    assert set(cameras) == {"yard", "gate-2"}
    yard, gate = cameras["yard"], cameras["gate-2"]
    assert (yard["state"], yard["decode_fps"], yard["sample_fps"]) == ("connected", 15.0, 5.0)
    assert (yard["width"], yard["height"], yard["last_error"]) == (1920, 1080, None)
    assert (yard["answered_fps"], yard["health"]) == (4.0, "live: 4.0 of 5 frames/s answered")
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

    async with http.get(web_url(server, "/api/cameras/gate-2")) as response:
        assert response.status == 200
        assert (await response.json())["name"] == "gate-2"
    async with http.get(web_url(server, "/api/cameras/gate-2/snapshot.jpg")) as response:
        assert response.status == 503  # nothing recognised yet
        assert response.headers["Retry-After"] == "1"


async def test_events_newest_first_paginated_with_crop_urls(
    server: WebServer, http: aiohttp.ClientSession, recording: Recording
) -> None:
    newest_first = recording.events[::-1]
    assert len(newest_first) >= 3
    # Without a history, the recent events in the search's shape, paged by its cursor.
    async with http.get(web_url(server, "/api/events?limit=1")) as response:
        first = await response.json()
    assert sorted(first) == ["events", "limit", "next_cursor"]
    assert [e["event_id"] for e in first["events"]] == [newest_first[0].event_id]
    cursor = first["next_cursor"]
    async with http.get(web_url(server, f"/api/events?cursor={cursor}&limit=2")) as response:
        assert response.status == 200
        page = await response.json()
    assert page["limit"] == 2
    assert [e["event_id"] for e in page["events"]] == [e.event_id for e in newest_first[1:3]]
    async with http.get(web_url(server, f"/api/events?cursor={len(newest_first) - 1}")) as r:
        assert (await r.json())["next_cursor"] is None  # the last page
    for item in page["events"]:
        assert "crop_jpeg_base64" not in item
        assert item["text"] in ("O567AM76", "Y836XH76") and item["camera"] == "yard"
        assert item["crop_url"] == f"/api/events/{item['event_id']}/crop.jpg"
        async with http.get(web_url(server, item["crop_url"])) as response:
            assert response.status == 200 and response.content_type == "image/jpeg"
            crop = await response.read()
        event = next(e for e in recording.events if e.event_id == item["event_id"])
        assert crop == event.crop_jpeg
        decode_jpeg(crop)
    async with http.get(web_url(server, "/api/events")) as response:
        assert len((await response.json())["events"]) == len(newest_first)
    for query in ("limit=0", "limit=201", "cursor=-1", "limit=x", "cursor=1e3", "limit=²"):
        async with http.get(web_url(server, f"/api/events?{query}")) as response:
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
    async with http.get(web_url(server, path)) as response:
        assert response.status == 404, path
        body = await response.read()
    assert b"passwd" not in body and b"root:" not in body


# --------------------------------------------------------------------------- snapshot, MJPEG


async def test_snapshot_is_a_jpeg_with_the_overlay(
    server: WebServer, http: aiohttp.ClientSession, recording: Recording
) -> None:
    async with http.get(web_url(server, "/api/cameras/yard/snapshot.jpg")) as response:
        assert response.status == 200 and response.content_type == "image/jpeg"
        index = int(response.headers["X-Frame-Index"])
        served = decode_jpeg(await response.read()).astype(np.int16)
    snapshot = next(s for s in recording.snapshots if s.frame.index == index)
    assert snapshot.plates
    raw = cv2.resize(snapshot.frame.image, (1280, 720), interpolation=cv2.INTER_AREA)
    overlay = np.any(render(snapshot) != raw, axis=2)  # where the boxes and labels are
    assert served.shape == raw.shape
    difference = np.abs(served - raw.astype(np.int16)).max(axis=2)
    assert overlay.sum() > 500
    assert difference[overlay].mean() > 60  # the overlay is there...
    assert difference[~overlay].mean() < 6  # ...and the rest is the frame (JPEG noise)


# --------------------------------------------------------------------------- the browser


async def _web_of(service: Service, runner: asyncio.Task[int]) -> tuple[WebServer, bool]:
    """The running service's web server, and whether the test started it itself.

    Until the service starts its own (``service.web``), the test starts one on it.
    """
    await eventually(lambda: bool(service.cameras) or runner.done(), 120)
    assert not runner.done(), runner.exception()
    web = getattr(service, "web", None)
    if web is not None:
        await eventually(lambda: web.port is not None, 30)
        return web, False
    web = WebServer(service, service.settings.web)
    await web.start()
    return web, True


@contextlib.asynccontextmanager
async def _service_on_clip(
    tmp_path: Path, triton_url: str, web: str = "{port: 0}"
) -> AsyncIterator[tuple[Service, WebServer]]:
    """The whole service on the clip (one real-time camera, ``yard``) and its web server;
    stopped on leaving, and it must then exit 0."""
    config = tmp_path / "web.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 2, realtime: true}}\n"
        f"triton: {{url: '{triton_url}', max_in_flight_per_camera: 1}}\n"
        f"events: {{stdout: false}}\nmetrics: {{port: 0}}\nweb: {web}\n"
    )
    service = Service(load_config(config))
    runner = asyncio.create_task(service.run())
    own_web: WebServer | None = None
    try:
        served, started_here = await _web_of(service, runner)
        own_web = served if started_here else None
        yield service, served
    finally:
        if own_web is not None:
            await own_web.stop()
        service.request_stop()
        await asyncio.wait_for(runner, 120)
    assert runner.result() == 0


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

LEGEND_JS = """
const legend = document.getElementById("legend");
if (!legend || legend.hidden) return null;
const title = document.getElementById(
  document.getElementById("legend-items").getAttribute("aria-labelledby"));
return [title.textContent, ...[...legend.querySelectorAll("li")].map((li) => {
  const swatch = li.querySelector(".swatch");
  const box = swatch.getBoundingClientRect();
  return [li.dataset.kind, li.textContent, getComputedStyle(swatch).backgroundColor,
    box.width > 4 && box.height > 4];
})];
"""


def _css_rgb(bgr: tuple[int, int, int]) -> str:
    blue, green, red = bgr
    return f"rgb({red}, {green}, {blue})"


async def test_chromium_plays_the_annotated_live_view(
    tmp_path: Path, triton_server: EmbeddedTriton, chromium: Any, loopback_ice: None
) -> None:
    async with _service_on_clip(tmp_path, triton_server.grpc_url) as (_, web):

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

        await asyncio.to_thread(chromium.get, web_url(web, "/"))
        await until(
            "const v = document.getElementById('video-' + arguments[0]); "
            "return v ? v.videoWidth : 0;",
            lambda width: width > 0,
            60,
        )
        # The legend says which box colour is which, in the colours the overlay draws.
        legend = await until(LEGEND_JS, lambda value: bool(value), 10)
        assert legend == [
            "Boxes in the video:",
            ["confirmed", "confirmed track", _css_rgb(CONFIRMED_COLOR), True],
            ["tentative", "tentative: not a confirmed track yet", _css_rgb(TENTATIVE_COLOR), True],
        ]
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


MJPEG_PIXELS_JS = """
const img = document.getElementById("mjpeg-" + arguments[0]);
if (!img || !img.naturalWidth) return null;
const canvas = document.createElement("canvas");
canvas.width = 160; canvas.height = 90;
const context = canvas.getContext("2d");
context.drawImage(img, 0, 0, 160, 90);
return [img.closest("article").dataset.video, img.title,
  Array.from(context.getImageData(0, 0, 160, 90).data.filter((_, i) => i % 4 === 1))];
"""


async def test_chromium_without_udp_falls_back_to_mjpeg_and_the_picture_moves(
    tmp_path: Path, triton_server: EmbeddedTriton, chromium_without_udp: Any, loopback_ice: None
) -> None:
    """WebRTC cannot connect (the browser may not use UDP, no TURN server): within
    web.webrtc_fallback_s the camera shows its MJPEG stream, and it plays."""
    web_config = "{port: 0, webrtc_fallback_s: 4}"
    async with _service_on_clip(tmp_path, triton_server.grpc_url, web_config) as (service, web):
        await eventually(lambda: service.snapshot("yard") is not None, 120)
        await asyncio.to_thread(chromium_without_udp.get, web_url(web, "/"))
        opened = time.monotonic()

        def pixels() -> Any:
            return chromium_without_udp.execute_script(MJPEG_PIXELS_JS, "yard")

        first = None
        while first is None:
            assert time.monotonic() - opened < 10, "no MJPEG picture within 10 s"
            await asyncio.sleep(0.25)
            first = await asyncio.to_thread(pixels)
        kind, title, before = first
        assert kind == "mjpeg" and "WebRTC" in title, first[:2]
        deadline = time.monotonic() + 20
        while True:  # the picture moves: the clip plays on, frame after frame
            await asyncio.sleep(0.5)
            _, _, now = await asyncio.to_thread(pixels)
            changed = sum(abs(a - b) > 24 for a, b in zip(before, now, strict=True))
            if changed > 100:
                break
            assert time.monotonic() < deadline, f"the MJPEG picture did not change ({changed})"
