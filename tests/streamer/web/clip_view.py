"""What the web tests serve and share: :class:`ClipView`, a small ``ViewSource`` over a
recording of the clip (frames of yard_cam.ts, the plates a real Triton reads in them, the
tracker's labels and the events the pass detector reports), and their small helpers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import av
import cv2
import numpy as np
from aiortc import RTCPeerConnection

from converters import assets
from streamer.delivery.events import PlateEvent, build_event
from streamer.domain.cameras import CameraStatus, Snapshot
from streamer.domain.frames import Frame, FrameResult
from streamer.inference.client import PlateRecognizer
from streamer.tracking.pass_params import PassParams
from streamer.tracking.passes import PassDetector
from streamer.web import WebServer

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
#: Frames of the clip recorded: the parked car's plate in all, the passing car's in 10 and 15.
RECORDED_FRAMES = (10, 15, 30, 45)


@dataclass(frozen=True)
class Recording:
    snapshots: tuple[Snapshot, ...]
    events: tuple[PlateEvent, ...]


def record_clip(triton_url: str) -> Recording:
    """The recording of the clip, read by the Triton at ``triton_url``."""

    async def record() -> Recording:
        recognizer = PlateRecognizer(triton_url, request_timeout_s=60)
        await recognizer.start()
        try:
            await recognizer.wait_ready(30)
            detector = PassDetector("yard", passes=replace(PassParams.defaults(), max_delay_s=60))
            snapshots, passes = [], []
            with av.open(str(CLIP)) as container:
                for index, decoded in enumerate(container.decode(video=0)):
                    if index > max(RECORDED_FRAMES):
                        break
                    if index not in RECORDED_FRAMES:
                        continue
                    image = decoded.to_ndarray(format="bgr24")
                    frame = Frame(
                        "yard", index, float(decoded.time), time.time(), time.monotonic(), image
                    )
                    result = FrameResult(frame, await recognizer.recognise(frame))
                    passes += detector.update(result)
                    snapshots.append(Snapshot(frame, detector.last_tracked))
            passes += detector.flush()
            # Each pass three times over (three vehicle passes' worth of events), so that
            # there is something to page through.
            events = [await build_event(p, 90) for _ in range(3) for p in passes]
            return Recording(tuple(snapshots), tuple(events))
        finally:
            await recognizer.close()

    # Its own thread and loop: the tests' loops belong to pytest-asyncio.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, record()).result()


class ClipView:
    """A ``ViewSource`` replaying the recording: camera ``yard`` shows the recorded
    snapshots in turn, ``rate`` per second; camera ``gate-2`` is reconnecting and has
    no frame yet."""

    def __init__(self, recording: Recording, rate: float = 4.0) -> None:
        self.recording = recording
        self.rate = rate
        self._t0 = time.monotonic()
        self.watchers: list[Callable[[PlateEvent], None]] = []

    def camera_status(self) -> list[CameraStatus]:
        return [
            CameraStatus(
                name="yard",
                state="connected",
                health="live: 4.0 of 5 frames/s answered",
                url=str(CLIP),
                decode_fps=15.0,
                sample_fps=5.0,
                answered_fps=4.0,
                last_error=None,
                frames_decoded=120,
                frames_sent=40,
                frames_answered=38,
                frames_dropped=2,
                width=1920,
                height=1080,
            ),
            CameraStatus(
                name="gate-2",
                state="reconnecting",
                health="reconnecting: connection refused",
                url="rtsp://***:***@gate.example/stream",
                decode_fps=0.0,
                sample_fps=5.0,
                answered_fps=0.0,
                last_error="connection refused",
                frames_decoded=0,
                frames_sent=0,
                frames_answered=0,
                frames_dropped=0,
                width=None,
                height=None,
            ),
        ]

    def snapshot(self, camera: str) -> Snapshot | None:
        if camera != "yard":
            return None
        snapshots = self.recording.snapshots
        return snapshots[int((time.monotonic() - self._t0) * self.rate) % len(snapshots)]

    def recent_events(self) -> list[PlateEvent]:
        return list(self.recording.events)

    def event(self, event_id: str) -> PlateEvent | None:
        return next((e for e in self.recording.events if e.event_id == event_id), None)

    def watch_events(self, watcher: Callable[[PlateEvent], None]) -> Callable[[], None]:
        self.watchers.append(watcher)
        return lambda: self.watchers.remove(watcher)

    def publish(self, event: PlateEvent) -> None:
        """A new event, as the service's publisher gives it to the live updates."""
        for watcher in list(self.watchers):
            watcher(event)

    def shards(self) -> dict[str, Any]:
        return {"shard": "0/1", "cameras": {"yard": 0, "gate-2": 0}}

    def labels(self) -> list[str]:
        return ["staff"]

    def history(self) -> None:
        return None  # the recent events only (the history is tested in tests/streamer/store/)

    def keeps_history(self) -> bool:
        return False


def web_url(web: WebServer, path: str, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{web.port}{path}"


def decode_jpeg(data: bytes) -> np.ndarray:
    assert data[:2] == b"\xff\xd8" and data[-2:] == b"\xff\xd9"
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    return image


async def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll ``check`` until it holds (bounded wait for things to settle), else fail."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not true after {timeout_s} s")
        await asyncio.sleep(0.05)


async def sdp_offer(pc: RTCPeerConnection) -> dict[str, str]:
    await pc.setLocalDescription(await pc.createOffer())  # returns once ICE gathering is done
    return {"sdp": pc.localDescription.sdp, "type": pc.localDescription.type}
