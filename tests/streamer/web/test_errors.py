"""Every refusal of the web view is an RFC 9457 problem (``application/problem+json``),
whoever refused: a handler, the token guard, aiohttp's router, or a handler that failed."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from streamer.config import WebConfig
from streamer.web import WebServer
from streamer.web.errors import PROBLEM, problems
from tests.log_records import traceback_of
from tests.streamer.web.clip_view import ClipView, Recording, web_url

TOKEN = "t0k3n-Zq8v1LrX4mWc9pBs"


async def _problem(response: aiohttp.ClientResponse, status: int) -> dict[str, Any]:
    assert response.status == status and response.content_type == PROBLEM
    body = await response.json(content_type=PROBLEM)
    assert body["status"] == status and body["type"] == "about:blank"
    assert body["title"] and body["detail"]
    return body


async def test_refusals_are_problems(
    server: WebServer, recording: Recording, http: aiohttp.ClientSession
) -> None:
    async with http.get(web_url(server, "/api/nothing-here")) as response:
        await _problem(response, 404)
    async with http.get(web_url(server, "/api/cameras/nowhere")) as response:
        assert (await _problem(response, 404))["detail"] == "no such camera"
    async with http.post(web_url(server, "/api/cameras")) as response:
        await _problem(response, 405)
        assert "GET" in response.headers["Allow"]
    async with http.get(web_url(server, "/api/events?limit=0")) as response:
        assert "limit" in (await _problem(response, 400))["detail"]
    async with http.get(web_url(server, "/"), headers={"Host": "lpr.example.com"}) as response:
        assert "127.0.0.1" in (await _problem(response, 403))["detail"]

    guarded = WebServer(ClipView(recording), WebConfig(port=0, token=TOKEN))
    await guarded.start()
    try:
        async with http.get(web_url(guarded, "/api/cameras")) as response:
            body = await _problem(response, 401)
            assert "token" in body["detail"] and TOKEN not in str(body)
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
    finally:
        await guarded.stop()


async def test_a_handler_that_fails_answers_500_without_its_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("internal detail rtsp://admin:pw@cam")

    app = web.Application(middlewares=[problems])
    app.router.add_get("/broken", broken)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        with caplog.at_level(logging.ERROR, logger="streamer.web.errors"):
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{port}/broken") as response,
            ):
                body = await _problem(response, 500)
        assert "internal detail" not in str(body)
        (record,) = caplog.records
        assert "GET /broken failed" in record.getMessage()
        assert "RuntimeError" in traceback_of(record)
    finally:
        await runner.cleanup()
