"""Who the web view answers: off the loopback address only requests with the token (the
streams too), and a client that keeps getting it wrong not even that for a while; without a
token only requests naming a local host that no proxy relayed; a POST that changes the
service not from a page of another origin."""

from __future__ import annotations

import logging

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

    # (Many wrong tokens from one client below: the limit on them is tested on its own.)
    config = WebConfig(host="127.0.0.2", port=0, token=TOKEN, auth_failures_burst=1000)
    web = WebServer(ClipView(recording), config)
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


@pytest.mark.parametrize("header", auth.PROXY_HEADERS)
async def test_without_a_token_a_request_through_a_proxy_is_refused(
    server: WebServer, http: aiohttp.ClientSession, header: str, caplog: pytest.LogCaptureFixture
) -> None:
    # What nginx sends by default to a server on its own host: a local Host header, and the
    # client's address in a forwarded header. Without a token that would open the API to
    # anyone who can reach the proxy.
    value = "for=192.0.2.7" if header == "Forwarded" else "192.0.2.7"
    headers = {"Host": f"127.0.0.1:{server.port}", header: value}
    with caplog.at_level(logging.WARNING, logger="streamer.web.auth"):
        for path in ("/api/cameras", "/api/events", "/"):
            async with http.get(web_url(server, path), headers=headers) as response:
                assert response.status == 403, path
                assert response.content_type == "application/problem+json"
                problem = await response.json()
                assert header in problem["detail"] and "web.token" in problem["detail"]
        async with http.post(web_url(server, "/api/reload"), headers=headers) as response:
            assert response.status == 403
    warnings = [r for r in caplog.records if "through a proxy" in r.getMessage()]
    assert len(warnings) == 1  # once, not once per request
    # Straight from a local client it is answered as before.
    async with http.get(web_url(server, "/api/cameras")) as response:
        assert response.status == 200


async def test_wrong_tokens_are_limited_per_client(
    recording: Recording, caplog: pytest.LogCaptureFixture
) -> None:
    burst = 5
    config = WebConfig(host="127.0.0.2", port=0, token=TOKEN, auth_failures_burst=burst)
    web = WebServer(ClipView(recording), config)
    await web.start()
    guesser = aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.4", 0)))
    other = aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.5", 0)))
    url = web_url(web, "/api/events", host="127.0.0.2")
    try:
        statuses = []
        with caplog.at_level(logging.WARNING, logger="streamer.web.auth_limits"):
            for i in range(100):  # a loop of guesses, by header, query and login form
                if i % 3 == 0:
                    request = guesser.get(url, headers={"Authorization": f"Bearer guess{i}"})
                elif i % 3 == 1:
                    request = guesser.get(f"{url}?token=guess{i}")
                else:
                    login = web_url(web, "/api/session", host="127.0.0.2")
                    request = guesser.post(login, json={"token": f"guess{i}"})
                async with request as response:
                    statuses.append(response.status)
                    if response.status == 429:
                        assert response.content_type == "application/problem+json"
                        retry = int(response.headers["Retry-After"])
                        assert 0 < retry <= config.auth_failures_window_s
        assert statuses[:burst] == [401] * burst
        assert statuses[burst:] == [429] * (100 - burst)
        # One line for the burst, not one per guess; the guesses themselves are not in it.
        lines = [r.getMessage() for r in caplog.records if "token wrong" in r.getMessage()]
        assert len(lines) == 1 and "127.0.0.4" in lines[0]
        assert "guess" not in caplog.text and TOKEN not in caplog.text
        # The guesser waits, even with the right token...
        async with guesser.get(url, headers={"Authorization": f"Bearer {TOKEN}"}) as response:
            assert response.status == 429
        # ...another client does not.
        async with other.get(url, headers={"Authorization": f"Bearer {TOKEN}"}) as response:
            assert response.status == 200
        async with other.post(
            web_url(web, "/api/session", host="127.0.0.2"), json={"token": TOKEN}
        ) as response:
            assert response.status == 204
        # A request with no token at all is no guess: still 401 from the guesser, not 429.
        async with guesser.get(url) as response:
            assert response.status == 401
    finally:
        await guesser.close()
        await other.close()
        await web.stop()


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
