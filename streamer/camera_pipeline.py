"""One camera's path through the service: frames -> Triton -> tracker -> vehicle passes.

Frames come from the camera's ``FrameQueue`` (filled by its decode thread). At
most ``max_in_flight`` frames of this camera are at Triton at once; results are
taken in frame order (the tracker needs order) even though Triton may answer
out of order. A frame whose inference fails is counted and skipped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from streamer.frame_queue import FrameQueue
from streamer.frames import Frame, FrameResult, PlateReading
from streamer.inference import InferenceError
from streamer.metrics import Metrics
from streamer.passes import PassDetector, PlatePass

LOG = logging.getLogger(__name__)

Recognise = Callable[[Frame], Awaitable[tuple[PlateReading, ...]]]
#: A frame at Triton: the frame, its request, when it was sent (monotonic).
_InFlight = tuple[Frame, "asyncio.Task[tuple[PlateReading, ...]]", float]
OnPasses = Callable[[list[PlatePass]], Awaitable[None]]


@dataclass
class PipelineStats:
    sent: int = 0
    answered: int = 0
    failed: int = 0
    plates: int = 0
    filtered: int = 0


class CameraPipeline:
    def __init__(
        self,
        camera: str,
        queue: FrameQueue,
        recognise: Recognise,
        passes: PassDetector,
        on_passes: OnPasses,
        *,
        max_in_flight: int,
        roi: tuple[float, float, float, float] | None = None,
        min_plate_width: float = 0.0,
        metrics: Metrics | None = None,
    ) -> None:
        self.camera = camera
        self.queue = queue
        self.recognise = recognise
        self.passes = passes
        self.on_passes = on_passes
        self.max_in_flight = max_in_flight
        self.roi = roi
        self.min_plate_width = min_plate_width
        self.metrics = metrics
        self.stats = PipelineStats()
        self.last_result: FrameResult | None = None

    async def run(self) -> None:
        """Until the camera's queue ends; then flush the tracker (every pass reported)."""
        slots = asyncio.Semaphore(self.max_in_flight)
        # In-flight requests in frame order; its bound is the in-flight bound.
        in_order: asyncio.Queue[_InFlight | None] = asyncio.Queue(self.max_in_flight)
        collector = asyncio.create_task(
            self._collect(in_order, slots), name=f"{self.camera}-collect"
        )
        try:
            while (frame := await self.queue.get()) is not None:
                await slots.acquire()
                sent_at = time.monotonic()
                task = asyncio.create_task(self.recognise(frame), name=f"{self.camera}-infer")
                self.stats.sent += 1
                await in_order.put((frame, task, sent_at))
            await in_order.put(None)
            await collector
        finally:
            if not collector.done():
                collector.cancel()
                # Cancel what is still in flight; nothing waits on it any more.
                while not in_order.empty():
                    item = in_order.get_nowait()
                    if item is not None:
                        item[1].cancel()
                await asyncio.gather(collector, return_exceptions=True)
        await self.on_passes(self.passes.flush())

    async def _collect(
        self,
        in_order: asyncio.Queue[_InFlight | None],
        slots: asyncio.Semaphore,
    ) -> None:
        while (item := await in_order.get()) is not None:
            frame, task, sent_at = item
            try:
                plates = await task
            except InferenceError as exc:
                self.stats.failed += 1
                if self.metrics is not None:
                    self.metrics.triton_errors.labels(exc.kind).inc()
                LOG.debug("%s: frame %d failed: %s", self.camera, frame.index, exc)
                continue
            finally:
                slots.release()
            self.stats.answered += 1
            if self.metrics is not None:
                self.metrics.inference_latency.labels(self.camera).observe(
                    time.monotonic() - sent_at
                )
            result = FrameResult(frame, self._keep(plates))
            self.stats.plates += len(result.plates)
            self.last_result = result
            passes = self.passes.update(result)
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
