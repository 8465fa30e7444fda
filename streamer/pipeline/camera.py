"""One camera's path through the service: frames -> Triton -> tracker -> vehicle passes.

Frames come from the camera's ``FrameQueue`` (filled by its decode thread). Once a frame
is queued, the camera waits for its turn at Triton (a permit of the shared, fair, adaptive
window: streamer/inference/scheduler.py) and only then takes a frame: a live camera the
newest it has (its queue drops the older ones, ``dropped``; any left besides the newest are
``superseded``, both counted), a file the next in order. It holds no picture while it waits.
Results are taken in frame order (the tracker needs order) even though Triton
may answer out of order. A frame whose inference fails is counted and skipped.
After each frame the motion gate's ``TrackSignal`` is told whether a track lives and that
the frame is answered: a file played as fast as possible waits on it (streamer/ingest/motion.py).

A frame's ``focus`` (where plates can be: what moved, from the motion gate) gets the boxes
of the camera's tracks as the answer to the frame sent ``max_in_flight`` frames before it
left them (:class:`TrackHistory`), and the focus of the frames sent since then, whose
answers that does not include yet: a vehicle that stops just after it is found stays looked
at. A live camera's newest frame also gets the focus of the frames it replaced (the queue does
the same for the frames it drops). Wherever one
of those is None (the whole frame), so is the frame's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from streamer.domain.frames import NO_BOXES, Frame, FrameResult, PlateReading
from streamer.domain.plate_pass import PlatePass, TrackFate
from streamer.foundation.metrics import Metrics
from streamer.inference.client import InferenceError
from streamer.inference.scheduler import Permit
from streamer.ingest.frame_queue import FrameQueue
from streamer.ingest.motion import TrackSignal
from streamer.tracking.passes import PassDetector

LOG = logging.getLogger(__name__)


class Inference(Protocol):
    """What the cameras need of the inference client: the service's
    :class:`~streamer.inference.pool.TritonPool`, or one endpoint's
    :class:`~streamer.inference.client.PlateRecognizer`."""

    def set_weight(self, camera: str, weight: float) -> None: ...

    def forget(self, camera: str) -> None: ...

    async def acquire(self, camera: str) -> Permit: ...

    async def recognise(
        self, frame: Frame, permit: Permit | None = None
    ) -> tuple[PlateReading, ...]: ...


#: A frame at Triton: the frame, its request, when it was sent (monotonic).
_InFlight = tuple[Frame, "asyncio.Task[tuple[PlateReading, ...]]", float]
OnPasses = Callable[[list[PlatePass]], Awaitable[None]]
#: Told each frame's (filtered) reads, in frame order, before the pass detector decides.
OnResult = Callable[[FrameResult], None]
#: Told how each track ended (streamer/domain/plate_pass.py, ``TrackFate``).
OnFate = Callable[[TrackFate], None]


class TrackHistory:
    """Where a camera's tracks were after each answered frame, kept for the focus of the
    frame sent ``lag`` frames later.

    Not the tracks as they are when a frame is sent: that depends on how many answers the
    collector has taken by then, so a file played as fast as possible would be looked at
    differently on a fast and a slow machine. With ``lag`` the camera's cap on frames in
    flight, the answer needed is (almost always) in already when the frame gets its permit.
    """

    def __init__(self, lag: int) -> None:
        self.lag = lag
        self._boxes: deque[np.ndarray] = deque(maxlen=lag + 1)
        self._recorded = 0
        self._new = asyncio.Event()

    def record(self, boxes: np.ndarray) -> None:
        """The tracks' boxes after the next frame sent was answered (or failed)."""
        self._boxes.append(boxes)
        self._recorded += 1
        self._new.set()

    async def for_frame(self, sent: int) -> np.ndarray:
        """The boxes for the frame sent ``sent``-th (0-based): after the answer to the frame
        ``lag`` before it, waiting for that answer; none for the first ``lag`` frames."""
        wanted = sent - self.lag
        if wanted < 0:
            return NO_BOXES
        while self._recorded <= wanted:
            self._new.clear()
            await self._new.wait()
        return self._boxes[wanted - (self._recorded - len(self._boxes))]


@dataclass
class PipelineStats:
    sent: int = 0
    superseded: int = 0  # live frames left unsent for a newer one still in the queue
    answered: int = 0
    failed: int = 0
    plates: int = 0
    filtered: int = 0


class CameraPipeline:
    def __init__(
        self,
        camera: str,
        queue: FrameQueue,
        inference: Inference,
        passes: PassDetector,
        on_passes: OnPasses,
        *,
        max_in_flight: int,
        roi: tuple[float, float, float, float] | None = None,
        min_plate_width: float = 0.0,
        metrics: Metrics | None = None,
        tracks: TrackSignal | None = None,
        on_result: OnResult | None = None,
    ) -> None:
        self.camera = camera
        self.tracks = tracks  # told after each tracker update whether a track lives (motion gate)
        self.on_result = on_result
        self.queue = queue
        self.inference = inference
        self.passes = passes
        self.on_passes = on_passes
        self.max_in_flight = max_in_flight
        self.roi = roi
        self.min_plate_width = min_plate_width
        self.metrics = metrics
        self.stats = PipelineStats()
        self.last_result: FrameResult | None = None

    async def run(self) -> None:
        """Until the camera's queue ends; then flush the tracker (every pass reported).

        If the collecting side raises (a bug, a hook that fails), the frames in flight are
        cancelled and the exception is raised here: the supervisor runs the pipeline again,
        on the same queue and tracker.
        """
        # In-flight requests in frame order; the scheduler caps them at max_in_flight.
        in_order: asyncio.Queue[_InFlight | None] = asyncio.Queue(self.max_in_flight)
        history = TrackHistory(self.max_in_flight)
        # What moved in the frames sent since the answer the tracks come from: a plate found
        # there (moving, or uncovered and then still) is looked at until its track is known.
        recent: deque[np.ndarray | None] = deque(maxlen=self.max_in_flight)
        collector = asyncio.create_task(
            self._collect(in_order, history), name=f"{self.camera}-collect"
        )
        feeder = asyncio.current_task()
        feeding = True

        def collector_done(task: asyncio.Task[None]) -> None:
            # A crashed collector would leave the loop below blocked on a full queue.
            if feeding and feeder is not None and not task.cancelled() and task.exception():
                feeder.cancel()

        collector.add_done_callback(collector_done)
        last_sent: int | None = None
        sent = 0
        try:
            # The permit first, then the frame: the camera holds no picture while it waits
            # for its turn (its queue keeps the newest), and sends the newest it has.
            while await self.queue.ready():
                permit = await self.inference.acquire(self.camera)
                frame = self._take_frame()
                if frame is None:  # another consumer of the queue took it
                    permit.release()
                    continue
                moved = frame.focus
                if moved is not None:
                    try:
                        tracks = await history.for_frame(sent)
                    except BaseException:
                        permit.release()
                        raise
                    frame = frame.looking_also_at([*recent, tracks])
                recent.append(moved)
                sent += 1
                last_sent = frame.index
                sent_at = time.monotonic()
                task = asyncio.create_task(
                    self.inference.recognise(frame, permit), name=f"{self.camera}-infer"
                )
                self.stats.sent += 1
                await in_order.put((frame, task, sent_at))
            await in_order.put(None)
            feeding = False
            await collector
        except asyncio.CancelledError:
            crash = None
            if collector.done() and not collector.cancelled():
                crash = collector.exception()
            if crash is None or feeder is None:
                raise
            feeder.uncancel()  # the cancel was ours, to wake the loop: raise the crash instead
            raise crash from None
        finally:
            feeding = False
            collector.remove_done_callback(collector_done)
            if not collector.done():
                collector.cancel()
            # Cancel what is still in flight; nothing waits on it any more.
            while not in_order.empty():
                item = in_order.get_nowait()
                if item is not None:
                    item[1].cancel()
            await asyncio.gather(collector, return_exceptions=True)
            if self.tracks is not None and last_sent is not None:
                self.tracks.done(last_sent)  # answered, or given up with this run
        await self.on_passes([*self.passes.flush(), *self.passes.take_withheld()])

    def _take_frame(self) -> Frame | None:
        """The frame to send: a live camera's newest (the frames it replaces were never
        sent, so it also looks where they saw motion); a file's next, in order."""
        frame = self.queue.poll()
        if frame is None or self.queue.policy != "drop_oldest":
            return frame
        replaced: list[np.ndarray | None] = []
        while (newer := self.queue.poll()) is not None:
            self.stats.superseded += 1
            replaced.append(frame.focus)
            frame = newer
        return frame.looking_also_at(replaced) if replaced else frame

    async def _collect(
        self, in_order: asyncio.Queue[_InFlight | None], history: TrackHistory
    ) -> None:
        while (item := await in_order.get()) is not None:
            frame, task, sent_at = item
            try:
                plates = await task
            except InferenceError as exc:
                history.record(self.passes.track_boxes())
                self.stats.failed += 1
                if self.metrics is not None:
                    self.metrics.triton_errors.labels(exc.kind).inc()
                LOG.debug("%s: frame %d failed: %s", self.camera, frame.index, exc)
                if self.tracks is not None:
                    self.tracks.done(frame.index)
                continue
            self.stats.answered += 1
            if self.metrics is not None:
                self.metrics.inference_latency.labels(self.camera).observe(
                    time.monotonic() - sent_at
                )
            result = FrameResult(frame, self._keep(plates))
            self.stats.plates += len(result.plates)
            self.last_result = result
            if self.on_result is not None:
                self.on_result(result)
            passes = [*self.passes.update(result), *self.passes.take_withheld()]
            history.record(self.passes.track_boxes())
            if self.tracks is not None:
                self.tracks.set(self.passes.live_tracks > 0)
                self.tracks.done(frame.index)
            if passes:
                await self.on_passes(passes)

    def _keep(self, plates: tuple[PlateReading, ...]) -> tuple[PlateReading, ...]:
        """Drop plates outside the region of interest (by centre) or narrower than the minimum."""
        kept = []
        for plate in plates:
            if plate.width < self.min_plate_width:
                continue
            if self.roi is not None:
                cx, cy = (plate.box[0] + plate.box[2]) / 2, (plate.box[1] + plate.box[3]) / 2
                x1, y1, x2, y2 = self.roi
                if not (x1 <= cx <= x2 and y1 <= cy <= y2):
                    continue
            kept.append(plate)
        self.stats.filtered += len(plates) - len(kept)
        return tuple(kept)
