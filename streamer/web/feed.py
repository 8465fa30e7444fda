"""What the viewers of one camera share: the producer track, the pace, the drawn picture.

A :class:`CameraFeed` exists while someone watches its camera. WebRTC viewers
each get a ``MediaRelay`` proxy of one :class:`AnnotatedCameraTrack` (so a
snapshot is fetched and drawn once for all of them; aiortc still encodes VP8
once per peer connection); MJPEG viewers share the last drawn picture and
its JPEG. The pace adapts to the number of viewers: at most
``Pace.budget_fps`` pictures per second are encoded for one camera, all
viewers together, within ``[min_fps, max_fps]`` per viewer. When the last
viewer leaves, the producer is stopped and the cached pictures dropped.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import numpy as np
from aiortc import MediaStreamTrack
from aiortc.contrib.media import MediaRelay

from streamer.domain.cameras import Snapshot
from streamer.domain.frames import Frame
from streamer.domain.plate_pass import TrackedPlate
from streamer.web.annotated_track import KEEPALIVE_S, AnnotatedCameraTrack
from streamer.web.overlay import MAX_WIDTH, encode_jpeg, render
from streamer.web.view_source import ViewSource

LOG = logging.getLogger(__name__)

#: JPEG quality of the MJPEG stream and the snapshot.
JPEG_QUALITY = 80


@dataclass(frozen=True)
class Pace:
    """How fast one camera's annotated picture is produced, by number of viewers."""

    max_fps: float = 15.0
    min_fps: float = 2.0
    #: Pictures encoded per second for one camera, all its viewers together.
    budget_fps: float = 30.0
    keepalive_s: float = KEEPALIVE_S

    def fps(self, viewers: int) -> float:
        if viewers <= 1:
            return self.max_fps
        return max(self.min_fps, min(self.max_fps, self.budget_fps / viewers))


class CameraFeed:
    def __init__(
        self, view: ViewSource, camera: str, pace: Pace | None = None, max_width: int = MAX_WIDTH
    ) -> None:
        self.view = view
        self.camera = camera
        self.pace = pace or Pace()
        self.max_width = max_width
        self.webrtc_viewers = 0
        self.mjpeg_viewers = 0
        self._relay = MediaRelay()
        self._producer: AnnotatedCameraTrack | None = None
        self._stopping: set[AnnotatedCameraTrack] = set()
        self._lock = asyncio.Lock()
        self._drawn: tuple[Frame, tuple[TrackedPlate, ...], np.ndarray] | None = None
        self._jpeg: tuple[Frame, tuple[TrackedPlate, ...], bytes] | None = None

    @property
    def viewers(self) -> int:
        return self.webrtc_viewers + self.mjpeg_viewers

    @property
    def producing(self) -> bool:
        """Whether a producer track runs (or is still winding down)."""
        return self._producer is not None or bool(self._stopping)

    def interval(self) -> float:
        """Seconds between two pictures at the current number of viewers."""
        return 1.0 / self.pace.fps(self.viewers)

    # -- WebRTC ---------------------------------------------------------------------------

    def subscribe(self) -> MediaStreamTrack:
        """A new WebRTC viewer's track (a relay proxy of the camera's one producer)."""
        if self._producer is None:
            self._producer = AnnotatedCameraTrack(
                self.view,
                self.camera,
                interval=self.interval,
                render=self.annotated,
                keepalive_s=self.pace.keepalive_s,
            )
            LOG.debug("camera %s: producer started", self.camera)
        self.webrtc_viewers += 1
        return self._relay.subscribe(self._producer, buffered=False)

    async def unsubscribe(self, track: MediaStreamTrack) -> None:
        """A WebRTC viewer left: stop its proxy; the last one out stops the producer."""
        track.stop()
        self.webrtc_viewers -= 1
        if self.webrtc_viewers == 0 and self._producer is not None:
            producer, self._producer = self._producer, None
            producer.stop()
            self._stopping.add(producer)
            try:
                await producer.wait_stopped()
            finally:
                self._stopping.discard(producer)
            LOG.debug(
                "camera %s: producer stopped after %d frames", self.camera, producer.frames_sent
            )
        self._release_cache()

    # -- shared pictures ------------------------------------------------------------------

    async def annotated(self, snapshot: Snapshot) -> np.ndarray:
        """The snapshot drawn (in a thread), once for every viewer that asks."""
        async with self._lock:
            drawn = self._drawn
            if drawn is not None and drawn[0] is snapshot.frame and drawn[1] == snapshot.plates:
                return drawn[2]
            image = await asyncio.to_thread(render, snapshot, self.max_width)
            if self.viewers:
                self._drawn = (snapshot.frame, snapshot.plates, image)
            return image

    async def jpeg(self, snapshot: Snapshot) -> bytes:
        """The annotated snapshot as JPEG (encoded in a thread), shared by MJPEG viewers."""
        cached = self._jpeg
        if cached is not None and cached[0] is snapshot.frame and cached[1] == snapshot.plates:
            return cached[2]
        image = await self.annotated(snapshot)
        async with self._lock:
            cached = self._jpeg
            if cached is not None and cached[0] is snapshot.frame and cached[1] == snapshot.plates:
                return cached[2]
            data = await asyncio.to_thread(encode_jpeg, image, JPEG_QUALITY)
            if self.viewers:
                self._jpeg = (snapshot.frame, snapshot.plates, data)
            return data

    def _release_cache(self) -> None:
        if self.viewers == 0:
            self._drawn = None
            self._jpeg = None

    # -- MJPEG ----------------------------------------------------------------------------

    def add_mjpeg_viewer(self) -> None:
        self.mjpeg_viewers += 1

    def remove_mjpeg_viewer(self) -> None:
        self.mjpeg_viewers -= 1
        self._release_cache()

    async def close(self) -> None:
        """Stop the producer whatever the viewers (server shutdown)."""
        producers = [p for p in (self._producer, *self._stopping) if p is not None]
        self._producer = None
        for producer in producers:
            producer.stop()
        for producer in producers:
            await producer.wait_stopped()
        self._drawn = None
        self._jpeg = None
