"""One camera's annotated picture as a WebRTC video track.

:class:`AnnotatedCameraTrack` is the producer of a camera's live view: its
``recv()`` waits for a snapshot newer than the one it sent last (asking the
:class:`~streamer.web.view_source.ViewSource` at most once per frame interval,
and only while someone calls ``recv()``), has it drawn and converted to YUV 4:2:0
off the event loop and returns it as an ``av.VideoFrame`` on a 90 kHz clock. A camera has one such
track however many people watch: :class:`~streamer.web.feed.CameraFeed` fans it
out with aiortc's ``MediaRelay``. When the camera has nothing new, the last
picture is sent again every ``keepalive_s`` so that a new viewer gets a
picture and a frozen camera still shows its last frame.

End of stream is aiortc's ``MediaStreamError``: ``stop()`` makes a pending
``recv()`` raise at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import math
import time
from collections.abc import Awaitable, Callable

import av
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from streamer.domain.cameras import Snapshot
from streamer.domain.frames import Frame
from streamer.web.overlay import MAX_WIDTH, render
from streamer.web.view_source import ViewSource

VIDEO_CLOCK_RATE = 90_000
VIDEO_TIME_BASE = fractions.Fraction(1, VIDEO_CLOCK_RATE)
#: Seconds after which an unchanged picture is sent again.
KEEPALIVE_S = 1.0

Render = Callable[[Snapshot], Awaitable[np.ndarray]]


async def render_in_thread(snapshot: Snapshot) -> np.ndarray:
    return await asyncio.to_thread(render, snapshot, MAX_WIDTH)


async def _wait(event: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``event`` is set first."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(seconds, 0.0)):
            await event.wait()


def video_frame(image: np.ndarray) -> av.VideoFrame:
    """A BGR picture (even sides) as a YUV 4:2:0 video frame (CPU work: call it in a thread).

    Converted once here, for every viewer: the encoders take 4:2:0 as it is. (Left
    in BGR, each viewer's encoder would convert the same shared frame object, at
    the same time, in the executor's threads, which PyAV does not allow.)
    """
    return av.VideoFrame.from_ndarray(image, format="bgr24").reformat(format="yuv420p")


class SnapshotWaiter:
    """Hands out a camera's snapshots, each at most once, no faster than ``interval()``.

    ``interval`` is read for every frame, so the pace follows the number of
    viewers. The same snapshot is handed out again after ``keepalive_s``.
    """

    def __init__(
        self,
        view: ViewSource,
        camera: str,
        interval: Callable[[], float],
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        self.view = view
        self.camera = camera
        self.interval = interval
        self.keepalive_s = keepalive_s
        self._last_frame: Frame | None = None  # kept: identity is the "new frame" test
        self._last_sent = -math.inf
        self._next_due = -math.inf

    async def next(self, stop: asyncio.Event, patience_s: float | None = None) -> Snapshot | None:
        """The next snapshot to show; None once ``stop`` is set or after ``patience_s``."""
        deadline = math.inf if patience_s is None else time.monotonic() + patience_s
        while not stop.is_set():
            now = time.monotonic()
            if now >= deadline:
                return None
            if now < self._next_due:
                await _wait(stop, min(self._next_due, deadline) - now)
                continue
            snapshot = self.view.snapshot(self.camera)
            if snapshot is not None and (
                snapshot.frame is not self._last_frame or now - self._last_sent >= self.keepalive_s
            ):
                self._last_frame = snapshot.frame
                self._last_sent = now
                self._next_due = now + self.interval()
                return snapshot
            # Nothing new yet: look again one frame interval later.
            await _wait(stop, min(self.interval(), deadline - now))
        return None


class AnnotatedCameraTrack(MediaStreamTrack):
    """A camera's snapshots with their plates drawn, as video (see the module doc)."""

    kind = "video"

    def __init__(
        self,
        view: ViewSource,
        camera: str,
        *,
        interval: Callable[[], float],
        render: Render = render_in_thread,
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        super().__init__()
        self.camera = camera
        self.frames_sent = 0
        self._waiter = SnapshotWaiter(view, camera, interval, keepalive_s)
        self._render = render
        self._stopped = asyncio.Event()
        self._idle = asyncio.Event()  # set while no recv() runs
        self._idle.set()
        self._start: float | None = None

    async def recv(self) -> av.VideoFrame:
        if self.readyState != "live":
            raise MediaStreamError
        self._idle.clear()
        try:
            snapshot = await self._waiter.next(self._stopped)
            if snapshot is None:
                raise MediaStreamError
            image = await self._render(snapshot)
            frame = await asyncio.to_thread(video_frame, image)
            if self.readyState != "live":
                raise MediaStreamError
        finally:
            self._idle.set()
        now = time.monotonic()
        if self._start is None:
            self._start = now
        frame.pts = round((now - self._start) * VIDEO_CLOCK_RATE)
        frame.time_base = VIDEO_TIME_BASE
        self.frames_sent += 1
        return frame

    def stop(self) -> None:
        super().stop()
        self._stopped.set()

    async def wait_stopped(self, timeout_s: float = 10.0) -> None:
        """After ``stop()``: until no ``recv()`` runs (the relay reading it has ended)."""
        async with asyncio.timeout(timeout_s):
            await self._idle.wait()
