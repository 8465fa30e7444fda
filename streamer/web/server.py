"""The live view and its API: an aiohttp server inside the service process.

Routes (every one behind the token when one is configured):

* ``GET /``, ``/events``, ``/login``: the live view, the events page, the login page
  (:mod:`streamer.web.pages`); ``POST``/``DELETE /api/session``: log in and out
  (:mod:`streamer.web.sessions`);
* ``GET /api/openapi.json``: this API in OpenAPI 3.1 (:mod:`streamer.web.openapi`);
  ``GET /api/info``: what the pages need to know (login, history, cameras, labels, the
  colours of the live view's boxes);
  ``GET /api/shards``: this replica (``I/N``) and which replica runs each camera;
  ``GET /api/webrtc``: the STUN and TURN servers for the live view's peer connections, and
  how long it waits for one before it shows the MJPEG stream;
* ``GET /api/cameras``, ``GET /api/cameras/{name}``: status, health in words, fps
  configured and answered, last error, the plates of the latest recognised frame, the
  stream URLs;
* ``GET /api/events``: the history searched (plate, camera, time, label, alert, cursor
  pages), or the recent events without one; ``GET /api/events/{id}``, its ``crop.jpg`` and
  ``frame.jpg``; ``GET /api/events.csv``; ``DELETE`` (:mod:`streamer.web.history`);
  ``GET /api/events/live``: new events as server-sent events
  (:mod:`streamer.web.live_events`);
* ``GET /api/cameras/{name}/snapshot.jpg``: the latest frame, annotated;
* ``GET /api/cameras/{name}/mjpeg``: annotated MJPEG (the fallback video,
  :mod:`streamer.web.mjpeg`);
* ``POST /api/cameras/{name}/webrtc``: SDP offer in, answer out (JSON
  ``{"sdp", "type"}``); the page posts it once ICE gathering is complete
  (:mod:`streamer.web.webrtc`);
* ``POST /api/reload``: read the config file again and apply it (as SIGHUP does); the
  outcome as JSON, 422 when the new config is refused (the running one stays).

Inference never waits for a viewer: pictures are drawn and encoded in threads,
only for cameras someone watches, at a pace set by the number of viewers (see
:mod:`streamer.web.feed`). A peer connection is closed when it fails, closes,
or does not connect within ``connect_timeout_s``; all of them on ``stop()``.

Every JSON answer is dumped through a model of :mod:`streamer.web.api_models` (the OpenAPI
document's); every refusal is an RFC 9457 problem, ``application/problem+json``
(:mod:`streamer.web.errors`).

Security (:mod:`streamer.web.auth`): by default the server listens on 127.0.0.1 only. On
any other address it refuses to start without ``web.token``; with a token every route
needs it or a login session (401 otherwise); without one, requests must name a local host.
A signed picture link opens its one picture without the token. Camera names and
event ids are checked against strict patterns before any lookup (404 otherwise), so no URL
reaches a file.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Coroutine
from typing import Any

from aiohttp import web
from aiortc import RTCPeerConnection

from streamer import __version__
from streamer.config import CAMERA_NAME_PATTERN, WebConfig
from streamer.domain.cameras import CameraStatus, Snapshot
from streamer.domain.picture_links import PictureLinks
from streamer.foundation.listener import Listener
from streamer.web import auth, mjpeg, openapi, pages
from streamer.web.api_models import (
    Camera,
    Info,
    ReloadOutcome,
    SessionDescription,
    Shards,
    WebRtcSettings,
    dump,
)
from streamer.web.auth_limits import FailureLimiter
from streamer.web.errors import PROBLEM, json_error, problem_text, problems
from streamer.web.feed import JPEG_QUALITY, CameraFeed, Pace
from streamer.web.history import HistoryRoutes
from streamer.web.live_events import LiveEvents
from streamer.web.overlay import BOX_COLORS, MAX_WIDTH, encode_jpeg, render
from streamer.web.sessions import SessionRoutes, Sessions
from streamer.web.view_source import ViewSource
from streamer.web.webrtc import (
    CONNECT_TIMEOUT_S,
    MAX_SDP_CHARS,
    PeerConnections,
    ice_servers,
    read_offer,
)

LOG = logging.getLogger(__name__)

#: Viewers at once, WebRTC and MJPEG, all cameras together; more get 503.
MAX_VIEWERS = 32
#: Seconds in-flight requests get to finish on stop() before they are cancelled.
SHUTDOWN_TIMEOUT_S = 5.0

_CAMERA_NAME = re.compile(CAMERA_NAME_PATTERN)


class WebServer:
    """The live view of ``view``: its routes, the feeds of the cameras someone watches, the
    WebRTC peer connections; listens from :meth:`start` to :meth:`stop`."""

    def __init__(
        self,
        view: ViewSource,
        config: WebConfig,
        *,
        pace: Pace | None = None,
        max_width: int = MAX_WIDTH,
        max_viewers: int = MAX_VIEWERS,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        links: PictureLinks | None = None,
    ) -> None:
        self.view = view
        self.host = config.host
        self.requested_port = config.port
        #: The port listened on, once started (``config.port`` may be 0: any free port).
        self.port: int | None = None
        self.pace = pace or Pace()
        self.max_width = max_width
        self.max_viewers = max_viewers
        self._token = config.token.get_secret_value() if config.token is not None else None
        #: Checks the signed picture links of webhook payloads (None: no link answers).
        self.links = links
        self.sessions = Sessions(config.session_ttl_s)
        self.limiter = FailureLimiter(config.auth_failures_burst, config.auth_failures_window_s)
        self._feeds: dict[str, CameraFeed] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = asyncio.Event()
        self.live = LiveEvents(view, self._closing)
        self._peers = PeerConnections(
            self._spawn, self._drop_if_idle, self._closing, connect_timeout_s, config.ice_servers
        )
        self.webrtc_fallback_s = config.webrtc_fallback_s
        self._stop_lock = asyncio.Lock()
        self._stopped = False
        self.listener: Listener | None = None

    # -- what tests and the API read ------------------------------------------------------

    @property
    def peer_connections(self) -> frozenset[RTCPeerConnection]:
        """The open (or opening, or closing) WebRTC peer connections."""
        return self._peers.open

    def viewers(self, camera: str | None = None) -> int:
        """WebRTC and MJPEG viewers of ``camera`` (of every camera when None)."""
        feeds = self._feeds.values() if camera is None else [self._feeds.get(camera)]
        return sum(feed.viewers for feed in feeds if feed is not None)

    def producing(self, camera: str) -> bool:
        """Whether anything is drawn or encoded for ``camera`` now."""
        return camera in self._feeds

    # -- life cycle -----------------------------------------------------------------------

    def app(self) -> web.Application:
        guard = auth.guard(self._token, self.sessions.admits, self.links, self.limiter)
        app = web.Application(middlewares=[problems, guard], client_max_size=2 * MAX_SDP_CHARS)
        app.on_response_prepare.append(auth.security_headers)
        pages.add_to(app.router)
        SessionRoutes(self._token, self.sessions, self.limiter).add_to(app.router)
        app.router.add_get("/api/openapi.json", self._openapi)
        app.router.add_get("/api/info", self._info)
        app.router.add_get("/api/shards", self._shards)
        app.router.add_get("/api/webrtc", self._webrtc_settings)
        app.router.add_get("/api/events/live", self.live.stream)  # before /api/events/{id}
        app.router.add_get("/api/cameras", self._cameras)
        app.router.add_get("/api/cameras/{name}", self._camera)
        app.router.add_get("/api/cameras/{name}/snapshot.jpg", self._snapshot)
        app.router.add_get("/api/cameras/{name}/mjpeg", self._mjpeg)
        app.router.add_post("/api/cameras/{name}/webrtc", self._webrtc)
        HistoryRoutes(self.view).add_to(app.router)
        app.router.add_post("/api/reload", self._reload)
        return app

    async def start(self) -> None:
        auth.refuse_exposure(self.host, self._token)
        if self.listener is not None or self._stopped:
            raise RuntimeError("the web server was already started")
        if self._token is not None and len(self._token) < auth.MIN_TOKEN_CHARS:
            LOG.warning(
                "web.token is shorter than %d characters: use a long random token",
                auth.MIN_TOKEN_CHARS,
            )
        listener = Listener(
            self.app(),
            self.host,
            self.requested_port,
            "live view",
            shutdown_timeout_s=SHUTDOWN_TIMEOUT_S,
        )
        await listener.start()
        self.listener = listener
        self.port = listener.port
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
            if self.listener is not None:
                await self.listener.stop()
            await self._peers.close_all("server stopping")
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

    # -- page and REST --------------------------------------------------------------------

    def _camera_name(self, request: web.Request) -> str:
        """The route's camera name if it is a valid, known camera; else 404."""
        name = request.match_info["name"]
        if not _CAMERA_NAME.match(name) or not any(
            status.name == name for status in self.view.camera_status()
        ):
            raise json_error(web.HTTPNotFound, "no such camera")
        return name

    async def _openapi(self, request: web.Request) -> web.Response:
        return web.json_response(await asyncio.to_thread(openapi.document, __version__))

    async def _info(self, request: web.Request) -> web.Response:
        info = {
            "version": __version__,
            "login": self._token is not None,
            "history": self.view.keeps_history(),
            "cameras": [status.name for status in self.view.camera_status()],
            "labels": self.view.labels(),
            "box_colors": BOX_COLORS,
        }
        return web.json_response(dump(Info, info))

    async def _webrtc_settings(self, request: web.Request) -> web.Response:
        settings = {
            "ice_servers": ice_servers(self._peers.ice),
            "fallback_s": self.webrtc_fallback_s,
        }
        return web.json_response(dump(WebRtcSettings, settings))

    async def _shards(self, request: web.Request) -> web.Response:
        return web.json_response(dump(Shards, self.view.shards()))

    def _camera_dict(self, status: CameraStatus) -> dict[str, Any]:
        snapshot = self.view.snapshot(status.name)
        base = f"/api/cameras/{status.name}"
        plates = snapshot.plates if snapshot is not None else ()
        camera = {
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
        return dump(Camera, camera)

    async def _reload(self, request: web.Request) -> web.Response:
        if not auth.same_origin(request):
            raise web.HTTPForbidden(text="a page of another origin may not reload the config")
        result = await self.view.reload("api")
        if result["outcome"] == "refused":  # a problem, with the outcome as its members
            text = problem_text(422, f"the new config is refused: {result['error']}", **result)
            return web.Response(status=422, text=text, content_type=PROBLEM)
        return web.json_response(dump(ReloadOutcome, result))

    async def _cameras(self, request: web.Request) -> web.Response:
        return web.json_response([self._camera_dict(s) for s in self.view.camera_status()])

    async def _camera(self, request: web.Request) -> web.Response:
        name = self._camera_name(request)
        status = next(s for s in self.view.camera_status() if s.name == name)
        return web.json_response(self._camera_dict(status))

    async def _snapshot(self, request: web.Request) -> web.Response:
        name = self._camera_name(request)
        snapshot = self.view.snapshot(name)
        if snapshot is None:
            raise json_error(
                web.HTTPServiceUnavailable, "no recognised frame yet", **{"Retry-After": "1"}
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
            raise json_error(web.HTTPServiceUnavailable, "the server is stopping")
        if self.viewers() >= self.max_viewers:
            raise json_error(web.HTTPServiceUnavailable, "too many viewers")

    async def _mjpeg(self, request: web.Request) -> web.StreamResponse:
        name = self._camera_name(request)
        self._admit()
        return await mjpeg.stream(
            request,
            self.view,
            self._feed(name),
            keepalive_s=self.pace.keepalive_s,
            closing=self._closing,
            release=self._drop_if_idle,
        )

    async def _webrtc(self, request: web.Request) -> web.Response:
        name = self._camera_name(request)
        sdp = await read_offer(request)
        self._admit()
        local = await self._peers.answer(name, sdp, self._feed(name))
        return web.json_response(dump(SessionDescription, {"sdp": local.sdp, "type": local.type}))


def _annotated_jpeg(snapshot: Snapshot, max_width: int) -> bytes:
    return encode_jpeg(render(snapshot, max_width), JPEG_QUALITY)
