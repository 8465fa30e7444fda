"""Region of interest and minimum plate width, on the pipeline's own filter; the tracks'
boxes a frame's focus gets."""

from __future__ import annotations

import asyncio
import threading
import time

import cv2
import numpy as np

from converters import assets
from streamer.domain.frames import Frame, PlateReading
from streamer.inference.client import PlateRecognizer
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.inference.scheduler import AdaptiveWindow, FairScheduler, Permit
from streamer.ingest.frame_queue import FrameQueue
from streamer.pipeline.camera import CameraPipeline, TrackHistory
from streamer.pipeline.cameras import LIVE_QUEUE_SIZE
from streamer.tracking.passes import PassDetector
from tests.polling import until


async def _no_passes(_: object) -> None:
    return None


class _Unused:
    async def acquire(self, camera: str) -> Permit:
        raise AssertionError("not called here")

    async def recognise(
        self, frame: Frame, permit: Permit | None = None
    ) -> tuple[PlateReading, ...]:
        raise AssertionError("not called here")


def _pipeline(**kwargs: object) -> CameraPipeline:
    return CameraPipeline(
        "gate",
        FrameQueue(2, "wait"),
        _Unused(),
        PassDetector("gate"),
        _no_passes,  # type: ignore[arg-type]
        max_in_flight=1,
        **kwargs,  # type: ignore[arg-type]
    )


PLATES = (
    PlateReading((100, 100, 160, 120), 0.8, "A123BC77", 0.9),  # centre (130, 110), 60 wide
    PlateReading((500, 400, 530, 415), 0.8, "B456CE77", 0.9),  # centre (515, 407), 30 wide
)


def test_roi_keeps_plates_whose_centre_is_inside() -> None:
    pipeline = _pipeline(roi=(0.0, 0.0, 300.0, 300.0))
    assert pipeline._keep(PLATES) == PLATES[:1]
    assert pipeline.stats.filtered == 1


def test_min_plate_width() -> None:
    pipeline = _pipeline(min_plate_width=40.0)
    assert pipeline._keep(PLATES) == PLATES[:1]
    assert _pipeline()._keep(PLATES) == PLATES


def test_run_ends_with_the_queue() -> None:
    pipeline = _pipeline()
    pipeline.queue.close()
    asyncio.run(asyncio.wait_for(pipeline.run(), 5))
    assert pipeline.stats.sent == 0


def test_track_history_gives_each_frame_the_tracks_a_fixed_lag_before_it() -> None:
    """Frame n gets the tracks as the answer to frame n - lag left them, however far the
    answers have got by the time it is sent: none for the first ``lag`` frames; a frame whose
    answer is not in yet waits for it."""

    def boxes(n: int) -> np.ndarray:
        return np.full((1, 4), float(n), np.float32)

    async def main() -> None:
        history = TrackHistory(lag=2)
        assert (await history.for_frame(0)).shape == (0, 4)
        assert (await history.for_frame(1)).shape == (0, 4)
        history.record(boxes(0))
        history.record(boxes(1))  # answers in before frame 2 is sent: only frame 0's counts
        assert (await history.for_frame(2))[0, 0] == 0.0
        history.record(boxes(2))
        history.record(boxes(3))
        assert (await history.for_frame(4))[0, 0] == 2.0
        assert (await history.for_frame(5))[0, 0] == 3.0
        waiting = asyncio.create_task(history.for_frame(6))  # needs frame 4's answer
        await asyncio.sleep(0.01)
        assert not waiting.done()
        history.record(boxes(4))
        assert (await asyncio.wait_for(waiting, 1))[0, 0] == 4.0

    asyncio.run(main())


async def test_a_live_camera_waits_for_its_turn_holding_no_frame(
    triton_server: EmbeddedTriton,
) -> None:
    """While another camera holds the only permit, the live queue keeps just the newest frame
    (the pipeline has taken none); with the permit, that newest frame is sent and answered,
    looking also where the dropped frames saw motion."""
    window = AdaptiveWindow(initial=1, minimum=1, maximum=1, tolerance=2)
    recognizer = PlateRecognizer(
        triton_server.grpc_url,
        scheduler=FairScheduler(window, max_per_camera=1),
        request_timeout_s=60,
    )
    await recognizer.start()
    queue = FrameQueue(LIVE_QUEUE_SIZE, "drop_oldest")
    pipeline = CameraPipeline(
        "gate", queue, recognizer, PassDetector("gate"), _no_passes, max_in_flight=1
    )
    try:
        await recognizer.wait_ready(30)
        other = await recognizer.acquire("other")  # the window's only permit
        running = asyncio.create_task(pipeline.run())
        stop = threading.Event()
        car = _car()
        for index in range(5):
            box = np.array([[10.0 * index, 0.0, 10.0 * index + 5, 5.0]], np.float32)
            queue.put_threadsafe(
                Frame("gate", index, index / 5, time.time(), time.monotonic(), car, box), stop
            )
            await asyncio.sleep(0.05)  # the pipeline's loop runs in between
        assert queue.qsize() == 1 and queue.dropped == 4 and pipeline.stats.sent == 0
        newest = queue.poll()
        assert newest is not None and newest.index == 4
        assert newest.focus is not None and sorted(newest.focus[:, 0]) == [0, 10, 20, 30, 40]
        queue.put_threadsafe(newest, stop)  # back, as it was
        other.release()
        await until(lambda: pipeline.stats.answered == 1, 60, "the newest frame's answer")
        queue.close()
        await asyncio.wait_for(running, 30)
    finally:
        await recognizer.close()
    assert pipeline.stats.sent == 1 and pipeline.stats.superseded == 0
    assert pipeline.last_result is not None and pipeline.last_result.frame.index == 4


def _car() -> np.ndarray:
    path = assets.verify(assets.asset("car.jpg"), assets.default_assets_dir())
    return cv2.resize(cv2.imread(str(path)), (1920, 1080), interpolation=cv2.INTER_AREA)
