"""MJPEG, the fallback video: one ``multipart/x-mixed-replace`` answer per viewer, a JPEG part
per new picture of the camera, drawn and encoded once for all its viewers by its feed."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable

from aiohttp import web

from streamer.web.annotated_track import SnapshotWaiter
from streamer.web.feed import CameraFeed
from streamer.web.view_source import ViewSource

LOG = logging.getLogger(__name__)

MJPEG_BOUNDARY = "lpr-frame"


async def stream(
    request: web.Request,
    view: ViewSource,
    feed: CameraFeed,
    *,
    keepalive_s: float,
    closing: asyncio.Event,
    release: Callable[[CameraFeed], None],
) -> web.StreamResponse:
    """Stream ``feed``'s camera to the client of ``request`` until it leaves or ``closing``
    is set: a new picture at most once per frame interval, the same one again after
    ``keepalive_s`` without a new one. ``release`` is given the feed once this viewer left it."""
    name = feed.camera
    feed.add_mjpeg_viewer()
    client = secrets.token_hex(4)
    LOG.info("mjpeg %s: viewer of %s (%d viewers)", client, name, feed.viewers)
    waiter = SnapshotWaiter(view, name, feed.interval, keepalive_s)
    response = web.StreamResponse(
        headers={"Content-Type": f"multipart/x-mixed-replace; boundary={MJPEG_BOUNDARY}"}
    )
    parts = 0
    try:
        await response.prepare(request)
        while not closing.is_set():
            transport = request.transport
            if transport is None or transport.is_closing():
                break
            snapshot = await waiter.next(closing, patience_s=keepalive_s)
            if snapshot is None:
                continue
            data = await feed.jpeg(snapshot)
            head = (
                f"--{MJPEG_BOUNDARY}\r\nContent-Type: image/jpeg\r\n"
                f"Content-Length: {len(data)}\r\n\r\n"
            ).encode("ascii")
            await response.write(head + data + b"\r\n")
            parts += 1
    except ConnectionError:
        pass  # the client left
    finally:
        feed.remove_mjpeg_viewer()
        release(feed)
        LOG.info("mjpeg %s: viewer of %s left after %d parts", client, name, parts)
    return response
