"""WebRTC viewers of the live view: one aiortc peer connection per viewer, fed by its camera's
feed (one producer track for all of them, relayed; see :mod:`streamer.web.feed`).

The page posts its offer once ICE gathering is complete (no trickle ICE: the answer carries
every candidate). STUN and TURN servers (``web.ice_servers``) serve both ends: the page gets
them from ``GET /api/webrtc`` (:func:`ice_servers`), a TURN server with a shared secret as a
user name and password made for that browser (the TURN REST API), never the secret. A peer
connection is closed, once, when it fails, closes, or does not connect within
``connect_timeout_s``; all of them when the server stops. Every log line about one names its
short random id.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCIceServer,
    RTCPeerConnection,
    RTCRtpSender,
    RTCSessionDescription,
)

from streamer.config import IceServerConfig
from streamer.web.errors import json_error
from streamer.web.feed import CameraFeed

LOG = logging.getLogger(__name__)

#: Seconds a new peer connection may take to connect before it is closed.
CONNECT_TIMEOUT_S = 30.0
#: The longest SDP offer accepted (the request body may be twice that: JSON escapes).
MAX_SDP_CHARS = 64 * 1024

#: Starts a named task the server keeps (and cancels on stop).
Spawn = Callable[[Coroutine[Any, Any, Any], str], asyncio.Task[Any]]


#: The user name part after the expiry in a TURN REST API user name (``<expiry>:<user>``).
TURN_REST_USER = "lpr"


def ice_servers(configs: list[IceServerConfig], now: float | None = None) -> list[dict[str, Any]]:
    """The ICE servers as a browser's ``RTCPeerConnection`` takes them (``urls``,
    ``username``, ``credential``). A server with a ``shared_secret`` gets a user name that
    expires (``<unix time + ttl>:lpr``) and the password the TURN server derives from it:
    base64(HMAC-SHA1(secret, user name)), as coturn's ``use-auth-secret`` checks it."""
    now = time.time() if now is None else now
    servers = []
    for config in configs:
        server: dict[str, Any] = {"urls": list(config.urls)}
        if config.shared_secret is not None:
            username = f"{int(now + config.credential_ttl_s)}:{TURN_REST_USER}"
            digest = hmac.new(
                config.shared_secret.get_secret_value().encode(),
                username.encode(),
                hashlib.sha1,
            ).digest()
            server |= {"username": username, "credential": base64.b64encode(digest).decode()}
        elif config.credential is not None:
            server |= {
                "username": config.username,
                "credential": config.credential.get_secret_value(),
            }
        servers.append(server)
    return servers


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


async def read_offer(request: web.Request) -> str:
    """The SDP of the offer ``request`` carries (JSON ``{"sdp", "type": "offer"}``); 415 or
    400 when it carries none."""
    if request.content_type != "application/json":
        raise json_error(web.HTTPUnsupportedMediaType, "send the offer as application/json")
    try:
        body = await request.json()
    except ValueError:
        raise json_error(web.HTTPBadRequest, "the body is not JSON") from None
    sdp = body.get("sdp") if isinstance(body, dict) else None
    if not isinstance(sdp, str) or not 0 < len(sdp) <= MAX_SDP_CHARS or body.get("type") != "offer":
        raise json_error(web.HTTPBadRequest, 'expected {"sdp": "<SDP offer>", "type": "offer"}')
    return sdp


class PeerConnections:
    """The WebRTC viewers of every camera, by peer connection.

    ``spawn`` starts the tasks that watch and close them; ``release`` is given a viewer's
    feed once the viewer has left it; once ``closing`` is set, offers are refused.
    """

    def __init__(
        self,
        spawn: Spawn,
        release: Callable[[CameraFeed], None],
        closing: asyncio.Event,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        ice: list[IceServerConfig] | None = None,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        #: The STUN and TURN servers of both ends (``web.ice_servers``).
        self.ice = ice or []
        self._spawn = spawn
        self._release = release
        self._closing = closing
        self._viewers: dict[RTCPeerConnection, Viewer] = {}

    @property
    def open(self) -> frozenset[RTCPeerConnection]:
        """The open (or opening, or closing) peer connections."""
        return frozenset(self._viewers)

    async def answer(self, camera: str, sdp: str, feed: CameraFeed) -> RTCSessionDescription:
        """A new viewer of ``camera`` on ``feed``: the answer to its offer ``sdp``; 400 when
        the offer is unusable, 503 when the server stops meanwhile."""
        pc = RTCPeerConnection(
            RTCConfiguration(iceServers=[RTCIceServer(**s) for s in ice_servers(self.ice)])
        )
        viewer = Viewer(secrets.token_hex(4), camera, pc, feed.subscribe(), feed)
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
            LOG.warning("webrtc %s: unusable offer for %s: %s", viewer.id, camera, exc)
            await self._close_soon(viewer, "unusable offer")
            raise json_error(web.HTTPBadRequest, "unusable SDP offer") from None
        if self._closing.is_set():
            await self._close_soon(viewer, "server stopping")
            raise json_error(web.HTTPServiceUnavailable, "the server is stopping")
        self._spawn(self._watch(viewer), f"webrtc-{viewer.id}-watch")
        LOG.info(
            "webrtc %s: viewer of %s connecting (%d peer connections)",
            viewer.id,
            camera,
            len(self._viewers),
        )
        return pc.localDescription

    async def close_all(self, reason: str) -> None:
        """Close every peer connection (those closing already: wait for them)."""
        viewers = list(self._viewers.values())
        await asyncio.gather(
            *(self._close_soon(v, reason) for v in viewers), return_exceptions=True
        )

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
            viewer.closer = self._spawn(self._close(viewer, reason), f"webrtc-{viewer.id}-close")
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
                self._release(viewer.feed)
        LOG.info("webrtc %s: closed (%d peer connections)", viewer.id, len(self._viewers))
