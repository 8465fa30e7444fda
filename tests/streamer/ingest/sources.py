"""Helpers of the CameraSource tests: sources on a file or an RTSP URL, and waiting on them.

The RTSP tests (``needs_rtsp``) run against a real GStreamer RTSP server (tests/rtsp_server.py;
the fixtures are in tests/streamer/ingest/conftest.py); they are never skipped: `make test`
installs it (Makefile: APT_PACKAGES).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streamer.domain.frames import Frame
from streamer.ingest.frame_queue import FrameQueue
from streamer.ingest.source import CameraSource

CLIP_FRAMES = 120  # yard_cam.ts: 1920x1080 H.264, 15 fps, one keyframe, B-frames

# Never skipped: `make test` installs GStreamer's RTSP server (Makefile: APT_PACKAGES).
needs_rtsp = pytest.mark.usefixtures("gst_rtsp_installed")


def make_source(url: str | Path, queue: FrameQueue, **kwargs: object) -> CameraSource:
    """A source named "cam" at 5 fps, as fast as possible, played once (unless ``kwargs``)."""
    options: dict = {"sample_fps": 5, "realtime": False, "loop_file": False}
    options.update(kwargs)
    return CameraSource("cam", str(url), queue=queue, **options)


def make_live(url: str, queue: FrameQueue, **kwargs: object) -> CameraSource:
    """:func:`make_source` with short timeouts and reconnect delays, for a live URL."""
    options: dict = {
        "open_timeout_s": 2.0,
        "read_timeout_s": 1.0,
        "stall_timeout_s": 3.0,
        "reconnect_initial_delay_s": 0.2,
        "reconnect_max_delay_s": 1.0,
    }
    options.update(kwargs)
    return make_source(url, queue, **options)


async def drain(queue: FrameQueue, timeout_s: float = 20) -> list[Frame]:
    """Every frame until the queue closes."""
    frames = []
    async with asyncio.timeout(timeout_s):
        while (frame := await queue.get()) is not None:
            frames.append(frame)
    return frames


async def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Seconds until ``predicate()`` held (polled every 20 ms); fails after ``timeout_s``."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.02)
    return time.monotonic() - started


class Collector:
    """Drains a queue in a task, as the pipeline would."""

    def __init__(self, queue: FrameQueue) -> None:
        self.queue = queue
        self.frames: list[Frame] = []
        self.task = asyncio.create_task(self._run(), name="collector")

    async def _run(self) -> None:
        while (frame := await self.queue.get()) is not None:
            self.frames.append(frame)

    async def more(self, count: int, timeout_s: float, what: str) -> list[Frame]:
        start = len(self.frames)
        await wait_for(lambda: len(self.frames) >= start + count, timeout_s, what)
        return self.frames[start:]


def assert_no_thread_failure(caplog: pytest.LogCaptureFixture) -> None:
    failures = [r.getMessage() for r in caplog.records if "decode thread failed" in r.getMessage()]
    assert not failures
