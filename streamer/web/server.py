"""The live view and its API: an aiohttp server inside the service process.

Routes (every one behind the token when one is configured):

* ``GET /``: the page (cameras, their status and live video, recent events);
* ``GET /api/cameras``, ``GET /api/cameras/{name}``: status, fps, last error,
  the plates of the latest recognised frame, the stream URLs;
* ``GET /api/events?offset=&limit=``: recent events, newest first, without
  crops (each has a ``crop_url``); ``GET /api/events/{id}/crop.jpg``;
* ``GET /api/cameras/{name}/snapshot.jpg``: the latest frame, annotated;
* ``GET /api/cameras/{name}/mjpeg``: annotated MJPEG (the fallback video);
* ``POST /api/cameras/{name}/webrtc``: SDP offer in, answer out (JSON
  ``{"sdp", "type"}``); the page posts it once ICE gathering is complete.

Inference never waits for a viewer: pictures are drawn and encoded in threads,
only for cameras someone watches, at a pace set by the number of viewers (see
:mod:`streamer.web.feed`). A peer connection is closed when it fails, closes,
or does not connect within ``connect_timeout_s``; all of them on ``stop()``.

Security: by default the server listens on 127.0.0.1 only. On any other
address it refuses to start without ``web.token``; with a token every route
needs ``Authorization: Bearer <token>`` or ``?token=<token>`` (401 otherwise),
compared in constant time and never echoed. Without a token, requests must
name a local host (``Host: 127.0.0.1``, ``localhost``, ``[::1]``), which
stops DNS-rebinding pages from reading the API. Camera names and event ids are
checked against strict patterns before any lookup (404 otherwise), so no URL
reaches a file.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCPeerConnection,
    RTCRtpSender,
    RTCSessionDescription,
)

from streamer.config.schema import CAMERA_NAME_PATTERN, WebConfig
from streamer.delivery.events import PlateEvent
from streamer.web.annotated_track import SnapshotWaiter
from streamer.web.feed import JPEG_QUALITY, CameraFeed, Pace
from streamer.web.overlay import MAX_WIDTH, encode_jpeg, render
from streamer.web.page import page
from streamer.web.view_source import CameraStatus, Snapshot, ViewSource

LOG = logging.getLogger(__name__)

#: Hosts the server may listen on without a token (this machine only).
LOCAL_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
#: Viewers at once, WebRTC and MJPEG, all cameras together; more get 503.
MAX_VIEWERS = 32
#: Seconds a new peer connection may take to connect before it is closed.
CONNECT_TIMEOUT_S = 30.0
#: Seconds in-flight requests get to finish on stop() before they are cancelled.
SHUTDOWN_TIMEOUT_S = 5.0
MAX_SDP_CHARS = 64 * 1024
EVENTS_PAGE_DEFAULT = 50
EVENTS_PAGE_MAX = 200
MJPEG_BOUNDARY = "lpr-frame"

_CAMERA_NAME = re.compile(CAMERA_NAME_PATTERN)
#: An event's message id: its UUID, with ``.v<version>`` for a correction.
_EVENT_ID = re.compile(
    r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(\.v[0-9]{1,6})?$"
)
_UINT = re.compile(r"^[0-9]{1,9}$")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class WebSecurityError(ValueError):
    """The web server would be reachable from other machines without a token."""


def _error(status: type[web.HTTPException], message: str) -> web.HTTPException:
    return status(text=json.dumps({"error": message}), content_type="application/json")


def _host_name(host_header: str) -> str:
    """``127.0.0.1:8080`` -> ``127.0.0.1``; ``[::1]:8080`` -> ``::1``."""
    host = host_header.lower()
    if host.startswith("["):
        return host[1 : host.find("]")]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


@dataclass(eq=False)
class Viewer:
    """One WebRTC peer connection watching one camera."""

    id: str  # short random id carried by every log line about this connection
    camera: str
    pc: RTCPeerConnection
    track: MediaStreamTrack
    feed: CameraFeed
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    closer: asyncio.Task[None] | None = None


class WebServer:
    def __init__(
        self,
        view: ViewSource,
        config: WebConfig,
        *,
        pace: Pace | None = None,
        max_width: int = MAX_WIDTH,
        max_viewers: int = MAX_VIEWERS,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self.view = view
        self.host = config.host
        self.requested_port = config.port
        #: The port listened on, once started (``config.port`` may be 0: any free port).
        self.port: int | None = None
        self.pace = pace or Pace()
        self.max_width = max_width
        self.max_viewers = max_viewers
        self.connect_timeout_s = connect_timeout_s
        self._token = config.token.get_secret_value() if config.token is not None else None
        self._feeds: dict[str, CameraFeed] = {}
        self._viewers: dict[RTCPeerConnection, Viewer] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = asyncio.Event()
        self._stop_lock = asyncio.Lock()
        self._stopped = False
        self._runner: web.AppRunner | None = None

    # -- what tests and the API read ------------------------------------------------------

    @property
    def peer_connections(self) -> frozenset[RTCPeerConnection]:
        """The open (or opening, or closing) WebRTC peer connections."""
        return frozenset(self._viewers)

    def viewers(self, camera: str | None = None) -> int:
        """WebRTC and MJPEG viewers of ``camera`` (of every camera when None)."""
        feeds = self._feeds.values() if camera is None else [self._feeds.get(camera)]
        return sum(feed.viewers for feed in feeds if feed is not None)

    def producing(self, camera: str) -> bool:
        """Whether anything is drawn or encoded for ``camera`` now."""
        return camera in self._feeds

    # -- life cycle -----------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard], client_max_size=2 * MAX_SDP_CHARS)
        app.on_response_prepare.append(self._security_headers)
        app.router.add_get("/", self._page)
        app.router.add_get("/api/cameras", self._cameras)
        app.router.add_get("/api/cameras/{name}", self._camera)
        app.router.add_get("/api/cameras/{name}/snapshot.jpg", self._snapshot)
        app.router.add_get("/api/cameras/{name}/mjpeg", self._mjpeg)
        app.router.add_post("/api/cameras/{name}/webrtc", self._webrtc)
        app.router.add_get("/api/events", self._events)
        app.router.add_get("/api/events/{event_id}/crop.jpg", self._crop)
        return app

    async def start(self) -> None:
        if self._token is None and self.host.lower() not in LOCAL_HOSTS:
            raise WebSecurityError(
                f"web.host is {self.host!r}, not 127.0.0.1/::1/localhost: set web.token "
                "(e.g. token: ${LPR_WEB_TOKEN}) so that the live view, the API and the "
                "streams are not open to anyone who can reach that address"
            )
        if self._runner is not None or self._stopped:
            raise RuntimeError("the web server was already started")
        if self._token is not None and len(self._token) < 16:
            LOG.warning("web.token is shorter than 16 characters: use a long random token")
        runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.requested_port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
        self.port = sockets[0].getsockname()[1] if sockets else self.requested_port
        shown = f"[{self.host}]" if ":" in self.host else self.host
        LOG.info(
            "live view on http://%s:%d/ (%s)",
            shown,
            self.port,
            "token required" if self._token else "no token: this machine only",
        )

    async def stop(self) -> None:
        """Stop listening, end the streams, close every peer connection. Idempotent."""
        async with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
            self._closing.set()  # MJPEG streams end; new WebRTC offers are refused
            if self._runner is not None:
                await self._runner.cleanup()
                self._runner = None
            viewers = list(self._viewers.values())
            await asyncio.gather(
                *(self._close_soon(v, "server stopping") for v in viewers), return_exceptions=True
            )
            for feed in list(self._feeds.values()):
                await feed.close()
            self._feeds.clear()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            LOG.info("live view stopped")

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            LOG.error("task %s failed", task.get_name(), exc_info=task.exception())

    # -- security -------------------------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self._token is None:
            if _host_name(request.host) not in LOCAL_HOSTS:
                raise web.HTTPForbidden(text="this server answers requests for 127.0.0.1 only")
        elif not self._token_ok(request):
            raise web.HTTPUnauthorized(
                text="a valid token is required: Authorization: Bearer <token>, or ?token=",
                headers={"WWW-Authenticate": 'Bearer realm="lpr-streamer"'},
            )
        return await handler(request)

    def _token_ok(self, request: web.Request) -> bool:
        assert self._token is not None
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            supplied = value.strip()
        else:
            supplied = request.query.get("token", "")
        return bool(supplied) and hmac.compare_digest(
            supplied.encode("utf-8"), self._token.encode("utf-8")
        )

    @staticmethod
    async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
        headers = response.headers
        headers.setdefault("Cache-Control", "no-store")
        headers.setdefault("X-Content-Type-Options", "nosniff")
        headers.setdefault("Referrer-Policy", "no-referrer")
        headers.setdefault("X-Frame-Options", "DENY")

    def _camera_name(self, request: web.Request) -> str:
        """The route's camera name if it is a valid, known camera; else 404."""
        name = request.match_info["name"]
        if not _CAMERA_NAME.match(name) or not any(
            status.name == name for status in self.view.camera_status()
        ):
            raise _error(web.HTTPNotFound, "no such camera")
        return name

    # -- page and REST --------------------------------------------------------------------

    async def _page(self, request: web.Request) -> web.Response:
        nonce = secrets.token_urlsafe(16)
        csp = (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
            "img-src 'self'; media-src 'self' blob:; connect-src 'self'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )
        return web.Response(
            text=page(nonce),
            content_type="text/html",
            headers={"Content-Security-Policy": csp},
        )

    def _camera_dict(self, status: CameraStatus) -> dict[str, Any]:
        snapshot = self.view.snapshot(status.name)
        base = f"/api/cameras/{status.name}"
        plates = snapshot.plates if snapshot is not None else ()
        return {
            **dataclasses.asdict(status),
            "viewers": self.viewers(status.name),
            "plates": [
                {
                    "text": plate.text,
                    "read": plate.read,
                    "decided": plate.decided,
                    "track_id": plate.track_id,
                    "confirmed": plate.confirmed,
                    "box": [round(v, 1) for v in plate.box],
                }
                for plate in plates
            ],
            "snapshot_url": f"{base}/snapshot.jpg",
            "mjpeg_url": f"{base}/mjpeg",
            "webrtc_url": f"{base}/webrtc",
        }

    async def _cameras(self, request: web.Request) -> web.Response:
        return web.json_response([self._camera_dict(s) for s in self.view.camera_status()])

    async def _camera(self, request: web.Request) -> web.Response:
        name = self._camera_name(request)
        status = next(s for s in self.view.camera_status() if s.name == name)
        return web.json_response(self._camera_dict(status))

    @staticmethod
    def _event_dict(event: PlateEvent) -> dict[str, Any]:
        return {
            **event.to_dict(include_crop=False),
            "crop_url": f"/api/events/{event.message_id}/crop.jpg",
        }

    async def _events(self, request: web.Request) -> web.Response:
        offset = _int_param(request, "offset", 0, 0, 10**9)
        limit = _int_param(request, "limit", EVENTS_PAGE_DEFAULT, 1, EVENTS_PAGE_MAX)
        events = self.view.recent_events()[::-1]  # newest first
        return web.json_response(
            {
                "total": len(events),
                "offset": offset,
                "limit": limit,
                "events": [self._event_dict(e) for e in events[offset : offset + limit]],
            }
        )

    async def _crop(self, request: web.Request) -> web.Response:
        event_id = request.match_info["event_id"]
        event = self.view.event(event_id) if _EVENT_ID.match(event_id) else None
        if event is None:
            raise _error(web.HTTPNotFound, "no such event")
        return web.Response(
            body=event.crop_jpeg,
            content_type="image/jpeg",
            headers={"Cache-Control": "private, max-age=86400, immutable"},
        )

    async def _snapshot(self, request: web.Request) -> web.Response:
        name = self._camera_name(request)
        snapshot = self.view.snapshot(name)
        if snapshot is None:
            raise web.HTTPServiceUnavailable(
                text=json.dumps({"error": "no recognised frame yet"}),
                content_type="application/json",
                headers={"Retry-After": "1"},
            )
        feed = self._feeds.get(name)
        if feed is not None:  # someone watches: share the picture drawn for them
            data = await feed.jpeg(snapshot)
        else:
            data = await asyncio.to_thread(_annotated_jpeg, snapshot, self.max_width)
        return web.Response(
            body=data,
            content_type="image/jpeg",
            headers={"X-Frame-Index": str(snapshot.frame.index)},
        )

    # -- streams --------------------------------------------------------------------------

    def _feed(self, camera: str) -> CameraFeed:
        feed = self._feeds.get(camera)
        if feed is None:
            feed = self._feeds[camera] = CameraFeed(self.view, camera, self.pace, self.max_width)
        return feed

    def _drop_if_idle(self, feed: CameraFeed) -> None:
        if feed.viewers == 0 and not feed.producing and self._feeds.get(feed.camera) is feed:
            del self._feeds[feed.camera]

    def _admit(self) -> None:
        if self._closing.is_set():
            raise _error(web.HTTPServiceUnavailable, "the server is stopping")
        if self.viewers() >= self.max_viewers:
            raise _error(web.HTTPServiceUnavailable, "too many viewers")

    async def _mjpeg(self, request: web.Request) -> web.StreamResponse:
        name = self._camera_name(request)
        self._admit()
        feed = self._feed(name)
        feed.add_mjpeg_viewer()
        client = secrets.token_hex(4)
        LOG.info("mjpeg %s: viewer of %s (%d viewers)", client, name, feed.viewers)
        waiter = SnapshotWaiter(self.view, name, feed.interval, self.pace.keepalive_s)
        response = web.StreamResponse(
            headers={"Content-Type": f"multipart/x-mixed-replace; boundary={MJPEG_BOUNDARY}"}
        )
        parts = 0
        try:
            await response.prepare(request)
            while not self._closing.is_set():
                transport = request.transport
                if transport is None or transport.is_closing():
                    break
                snapshot = await waiter.next(self._closing, patience_s=self.pace.keepalive_s)
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
            self._drop_if_idle(feed)
            LOG.info("mjpeg %s: viewer of %s left after %d parts", client, name, parts)
        return response

    async def _webrtc(self, request: web.Request) -> web.Response:
        name = self._camera_name(request)
        if request.content_type != "application/json":
            raise _error(web.HTTPUnsupportedMediaType, "send the offer as application/json")
        try:
            body = await request.json()
        except ValueError:
            raise _error(web.HTTPBadRequest, "the body is not JSON") from None
        sdp = body.get("sdp") if isinstance(body, dict) else None
        if (
            not isinstance(sdp, str)
            or not 0 < len(sdp) <= MAX_SDP_CHARS
            or body.get("type") != "offer"
        ):
            raise _error(web.HTTPBadRequest, 'expected {"sdp": "<SDP offer>", "type": "offer"}')
        self._admit()

        feed = self._feed(name)
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        viewer = Viewer(secrets.token_hex(4), name, pc, feed.subscribe(), feed)
        self._viewers[pc] = viewer  # before any await: stop() sees it

        def on_state() -> None:
            state = pc.connectionState
            LOG.debug("webrtc %s: connection %s", viewer.id, state)
            if state == "connected" and not viewer.connected.is_set():
                viewer.connected.set()
                LOG.info("webrtc %s: connected", viewer.id)
            elif state in ("failed", "closed"):
                self._close_soon(viewer, state)

        pc.on("connectionstatechange", on_state)
        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
            transceiver = next(
                (t for t in pc.getTransceivers() if t.kind == "video" and t.sender.track is None),
                None,
            )
            if transceiver is None:
                raise ValueError("the offer has no video to receive")
            pc.addTrack(viewer.track)
            if "VP8/90000" in sdp:  # VP8: cheap to encode, decoded by every browser
                codecs = RTCRtpSender.getCapabilities("video").codecs
                transceiver.setCodecPreferences(
                    [c for c in codecs if c.mimeType in ("video/VP8", "video/rtx")]
                )
            answer = await pc.createAnswer()
            await pc.setLocalDescription(answer)
        except Exception as exc:
            LOG.warning("webrtc %s: unusable offer for %s: %s", viewer.id, name, exc)
            await self._close_soon(viewer, "unusable offer")
            raise _error(web.HTTPBadRequest, "unusable SDP offer") from None
        if self._closing.is_set():
            await self._close_soon(viewer, "server stopping")
            raise _error(web.HTTPServiceUnavailable, "the server is stopping")
        self._spawn(self._watch(viewer), name=f"webrtc-{viewer.id}-watch")
        LOG.info(
            "webrtc %s: viewer of %s connecting (%d peer connections)",
            viewer.id,
            name,
            len(self._viewers),
        )
        local = pc.localDescription
        return web.json_response({"sdp": local.sdp, "type": local.type})

    async def _watch(self, viewer: Viewer) -> None:
        """Close a peer connection that does not connect in time."""
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                await viewer.connected.wait()
        except TimeoutError:
            self._close_soon(viewer, f"not connected within {self.connect_timeout_s:g} s")

    def _close_soon(self, viewer: Viewer, reason: str) -> asyncio.Task[None]:
        """Close ``viewer`` (once: later calls return the same task)."""
        if viewer.closer is None:
            viewer.closer = self._spawn(
                self._close(viewer, reason), name=f"webrtc-{viewer.id}-close"
            )
        return viewer.closer

    async def _close(self, viewer: Viewer, reason: str) -> None:
        LOG.info("webrtc %s: closing (%s)", viewer.id, reason)
        try:
            with contextlib.suppress(Exception):
                await viewer.pc.close()
        finally:
            try:
                await viewer.feed.unsubscribe(viewer.track)
            finally:
                self._viewers.pop(viewer.pc, None)
                self._drop_if_idle(viewer.feed)
        LOG.info("webrtc %s: closed (%d peer connections)", viewer.id, len(self._viewers))


def _int_param(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name, "")
    if not raw:
        return default
    if not _UINT.match(raw) or not low <= int(raw) <= high:
        raise _error(web.HTTPBadRequest, f"{name} must be an integer from {low} to {high}")
    return int(raw)


def _annotated_jpeg(snapshot: Snapshot, max_width: int) -> bytes:
    return encode_jpeg(render(snapshot, max_width), JPEG_QUALITY)
