"""MJPEG on real parts: the parts are JPEGs of the annotated clip, and a client that leaves
releases the camera."""

from __future__ import annotations

import asyncio

import aiohttp
import numpy as np

from streamer.web import WebServer
from streamer.web.overlay import CONFIRMED_COLOR
from tests.streamer.web.clip_view import decode_jpeg, eventually, web_url


async def test_mjpeg_parts_are_jpegs_and_a_leaving_client_releases_the_camera(
    server: WebServer, http: aiohttp.ClientSession
) -> None:
    async with http.get(web_url(server, "/api/cameras/yard/mjpeg")) as response:
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
            parts.append(decode_jpeg(data))
        assert server.viewers("yard") == 1 and server.producing("yard")
    assert all(part.shape == (720, 1280, 3) for part in parts)
    # Annotated: the confirmed track's green is in the parts.
    green = [np.all(np.abs(p.astype(int) - CONFIRMED_COLOR) < 40, axis=2).sum() for p in parts]
    assert max(green) > 300, green
    # The client has gone: the stream notices within a frame interval or a keep-alive.
    await eventually(lambda: not server.producing("yard") and server.viewers() == 0)
