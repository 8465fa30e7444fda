"""WebRTC on real parts: aiortc viewers of the clip share one producer, connect and leave a
hundred times without a leak, are all closed when the server stops; bad offers leave
nothing."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import threading
import time
from typing import Any

import aiohttp
import av
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from streamer.config import WebConfig
from streamer.web import WebServer
from streamer.web.webrtc import ice_servers
from tests.streamer.web.clip_view import ClipView, Recording, eventually, sdp_offer, web_url


async def _watch(
    http: aiohttp.ClientSession, url: str, *, frames: int = 1
) -> tuple[RTCPeerConnection, list[av.VideoFrame]]:
    """An aiortc viewer: offer, answer, connect, and ``frames`` decoded frames."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    try:
        pc.addTransceiver("video", direction="recvonly")
        tracks: asyncio.Queue[Any] = asyncio.Queue()
        pc.on("track", tracks.put_nowait)
        async with http.post(url, json=await sdp_offer(pc)) as response:
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
    url = web_url(server, "/api/cameras/yard/webrtc")
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
    await eventually(lambda: not server.peer_connections and not server.producing("yard"))


async def test_100_connect_disconnect_cycles_leak_nothing(
    server: WebServer, http: aiohttp.ClientSession, loopback_ice: None
) -> None:
    url = web_url(server, "/api/cameras/yard/webrtc")
    await _fill_default_executor()
    for _ in range(2):  # warm-up: lazily created, long-lived things exist from here on
        pc, _ = await _watch(http, url)
        await pc.close()
    await eventually(lambda: not server.peer_connections and not server.producing("yard"))
    tasks, threads = _counts()

    for cycle in range(100):
        pc, frames = await _watch(http, url)
        assert frames[0].width == 1280, cycle
        assert len(server.peer_connections) == 1
        await pc.close()
    # Bounded wait for the last closes to settle, then exact counts.
    try:
        await eventually(
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
    clients = [await _watch(http, web_url(web, "/api/cameras/yard/webrtc")) for _ in range(2)]
    async with http.get(web_url(web, "/api/cameras/yard/mjpeg")) as mjpeg:
        await mjpeg.content.readline()
        assert len(web.peer_connections) == 2 and web.viewers("yard") == 3
        await asyncio.gather(web.stop(), web.stop())
        assert not web.peer_connections and web.viewers() == 0 and not web.producing("yard")
    await web.stop()
    # The server closed the connections: the clients are told (DTLS close), not left waiting.
    await eventually(lambda: all(pc.connectionState == "closed" for pc, _ in clients))
    await http.close()
    await eventually(lambda: _counts() == (tasks, threads))


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
        web_url(server, "/api/cameras/yard/webrtc"),
        data=body,
        headers={"Content-Type": content_type},
    ) as response:
        assert response.status == status
    await eventually(lambda: not server.peer_connections and not server.producing("yard"))


def test_a_turn_shared_secret_gives_each_browser_a_password_of_its_own() -> None:
    """The TURN REST API as coturn's use-auth-secret checks it: the user name is the expiry
    (unix time) and a name, the password base64(HMAC-SHA1(secret, user name))."""
    config = WebConfig(
        ice_servers=[
            {"urls": ["stun:stun.example.org:3478"]},
            {"urls": ["turn:turn.example.org:3478"], "shared_secret": "s3cr3t-k3y"},
            {"urls": ["turns:relay.example.org"], "username": "site", "credential": "pw"},
        ]
    )
    stun, turn, static = ice_servers(config.ice_servers, now=1_000_000.0)
    assert stun == {"urls": ["stun:stun.example.org:3478"]}
    assert turn["username"] == f"{1_000_000 + 86_400}:lpr"
    digest = hmac.new(b"s3cr3t-k3y", turn["username"].encode(), hashlib.sha1).digest()
    assert turn["credential"] == base64.b64encode(digest).decode()
    assert static == {"urls": ["turns:relay.example.org"], "username": "site", "credential": "pw"}
    later = ice_servers(config.ice_servers, now=2_000_000.0)[1]
    assert later["credential"] != turn["credential"]  # it expires with its user name


async def test_the_page_gets_the_ice_servers_never_the_shared_secret(
    recording: Recording, http: aiohttp.ClientSession
) -> None:
    config = WebConfig(
        port=0,
        ice_servers=[{"urls": ["turn:127.0.0.1:9"], "shared_secret": "never-sent-anywhere"}],
        webrtc_fallback_s=5,
    )
    web = WebServer(ClipView(recording), config)
    await web.start()
    try:
        async with http.get(web_url(web, "/api/webrtc")) as response:
            assert response.status == 200
            body = await response.text()
    finally:
        await web.stop()
    settings = json.loads(body)
    assert settings["fallback_s"] == 5
    (server,) = settings["ice_servers"]
    assert server["urls"] == ["turn:127.0.0.1:9"] and server["username"].endswith(":lpr")
    assert "never-sent-anywhere" not in body
