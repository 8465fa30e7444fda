"""One camera's path through the service: frames -> Triton -> tracker -> vehicle passes.

Frames come from the camera's ``FrameQueue`` (filled by its decode thread). A
frame waits for its camera's turn at Triton (a permit of the shared, fair,
adaptive window: streamer/inference/scheduler.py); a live camera then sends the newest
frame it has, and the older ones it held are dropped (``superseded``, counted).
Results are taken in frame order (the tracker needs order) even though Triton
may answer out of order. A frame whose inference fails is counted and skipped.
After each frame the motion gate's ``TrackSignal`` is told whether a track lives and that
the frame is answered: a file played as fast as possible waits on it (streamer/ingest/motion.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from streamer.domain.frames import Frame, FrameResult, PlateReading
from streamer.inference.client import InferenceError
from streamer.inference.scheduler import Permit
from streamer.ingest.frame_queue import FrameQueue
from streamer.ingest.motion import TrackSignal
from streamer.ops.metrics import Metrics
from streamer.tracking.passes import PassDetector
from streamer.tracking.plate_pass import PlatePass, TrackFate

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
#: Told how each track ended (streamer/tracking/plate_pass.py, ``TrackFate``).
OnFate = Callable[[TrackFate], None]


@dataclass
class PipelineStats:
    sent: int = 0
    superseded: int = 0  # live frames replaced by a newer one while waiting for a permit
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
        collector = asyncio.create_task(self._collect(in_order), name=f"{self.camera}-collect")
        feeder = asyncio.current_task()
        feeding = True

        def collector_done(task: asyncio.Task[None]) -> None:
            # A crashed collector would leave the loop below blocked on a full queue.
            if feeding and feeder is not None and not task.cancelled() and task.exception():
                feeder.cancel()

        collector.add_done_callback(collector_done)
        last_sent: int | None = None
        try:
            while (frame := await self.queue.get()) is not None:
                permit = await self.inference.acquire(self.camera)
                frame = self._freshest(frame)
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

    def _freshest(self, frame: Frame) -> Frame:
        """A live camera sends the newest frame it has; files (``wait`` policy) send in order."""
        if self.queue.policy != "drop_oldest":
            return frame
        while (newer := self.queue.poll()) is not None:
            self.stats.superseded += 1
            frame = newer
        return frame

    async def _collect(self, in_order: asyncio.Queue[_InFlight | None]) -> None:
        while (item := await in_order.get()) is not None:
            frame, task, sent_at = item
            try:
                plates = await task
            except InferenceError as exc:
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
