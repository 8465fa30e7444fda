"""Who the web view answers: off the loopback address only requests with the token (the
streams too), without a token only requests naming a local host; a POST that changes the
service not from a page of another origin."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request
from aiortc import RTCConfiguration, RTCPeerConnection

from streamer.config import WebConfig
from streamer.web import WebSecurityError, WebServer, auth
from tests.streamer.web.clip_view import ClipView, Recording, sdp_offer, web_url

TOKEN = "t0k3n-Zq8v1LrX4mWc9pBs"


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
            url = web_url(web, path, host="127.0.0.2")
            # A browser asking for a page is sent to the login page; the API answers 401.
            refused = 303 if path == "/" else 401
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                async with http.get(url, headers=headers, allow_redirects=False) as response:
                    assert response.status == refused, (path, headers)
                    assert TOKEN not in await response.text()
            async with http.get(url + "?token=wrong", allow_redirects=False) as response:
                assert response.status == refused, path
            async with http.get(url, headers=bearer) as response:
                assert response.status == 200, path
                assert TOKEN.encode() not in await response.read()
            async with http.get(url + f"?token={TOKEN}") as response:
                assert response.status == 200, path
                assert TOKEN.encode() not in await response.read()
        # The login page and what it loads are open to all; they hold no data.
        for path in ("/login", "/static/login.js", "/static/style.css", "/static/common.js"):
            async with http.get(web_url(web, path, host="127.0.0.2")) as response:
                assert response.status == 200, path
        async with http.get(web_url(web, "/static/../server.py", host="127.0.0.2")) as response:
            assert response.status in (401, 404)
        # A picture link that is not signed by this server opens nothing.
        crop = web_url(web, f"/api/events/{event_id}/crop.jpg", host="127.0.0.2")
        async with http.get(crop + "?expires=99999999999&sig=forged") as response:
            assert response.status == 403
        # The streams too.
        mjpeg = web_url(web, "/api/cameras/yard/mjpeg", host="127.0.0.2")
        async with http.get(mjpeg) as response:
            assert response.status == 401
        async with http.get(mjpeg + f"?token={TOKEN}") as response:
            assert response.status == 200
            assert (await response.content.readline()).startswith(b"--")
        webrtc = web_url(web, "/api/cameras/yard/webrtc", host="127.0.0.2")
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTransceiver("video", direction="recvonly")
        offer = await sdp_offer(pc)
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
        async with http.get(web_url(server, "/api/cameras"), headers={"Host": host}) as response:
            assert response.status == 200, host
    for host in ("evil.example", f"evil.example:{server.port}", "192.0.2.1"):
        async with http.get(web_url(server, "/api/cameras"), headers={"Host": host}) as response:
            assert response.status == 403, host


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (None, True),  # not sent by a browser's page: curl, the operator's scripts
        ("http://127.0.0.1:8080", True),
        ("http://127.0.0.1:9999", False),
        ("https://evil.example", False),
    ],
)
def test_a_page_of_another_origin_may_not_change_the_service(
    origin: str | None, allowed: bool
) -> None:
    headers = {"Host": "127.0.0.1:8080", **({"Origin": origin} if origin else {})}
    request = make_mocked_request("POST", "/api/reload", headers=headers)
    assert auth.same_origin(request) is allowed
