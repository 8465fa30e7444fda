"""The gRPC stream client against a real Triton: answers, errors, deadlines, restarts."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import av
import cv2
import numpy as np
import pytest

from converters import assets
from streamer.domain.frames import CHAR_PROB_FLOOR, Frame
from streamer.inference.client import InferenceError, PlateRecognizer
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.inference.scheduler import AdaptiveWindow, FairScheduler
from tests.footage import YARD_CLIP

if TYPE_CHECKING:
    from tests.conftest import SpareTriton


def _frame(image: np.ndarray, index: int = 0, camera: str = "test") -> Frame:
    return Frame(camera, index, index / 15, time.time(), time.monotonic(), image)


def _car() -> np.ndarray:
    path = assets.verify(assets.asset("car.jpg"), assets.default_assets_dir())
    return cv2.resize(cv2.imread(str(path)), (1920, 1080), interpolation=cv2.INTER_AREA)


async def test_frames_in_flight_are_answered_by_id(triton_server: EmbeddedTriton) -> None:
    recognizer = PlateRecognizer(triton_server.grpc_url, request_timeout_s=120)
    await recognizer.start()
    try:
        await recognizer.wait_ready(30)
        car, blank = _car(), np.zeros((360, 640, 3), np.uint8)
        frames = [_frame(car if i % 2 == 0 else blank, i) for i in range(8)]
        results = await asyncio.gather(*(recognizer.recognise(f) for f in frames))
    finally:
        await recognizer.close()
    for i, plates in enumerate(results):
        if i % 2:
            assert plates == ()
        else:
            assert any(abs(p.box[0] - 232) < 10 and p.text.startswith("B840") for p in plates)
    assert recognizer.stats.succeeded == 8 and recognizer.stats.failed == 0
    # Each reading carries, per character, what it could be: most likely first, the text's.
    for plate in results[0]:
        assert plate.char_probs is not None and len(plate.char_probs) == len(plate.text)
        for c, choices in zip(plate.text, plate.char_probs, strict=True):
            assert choices[0][0] == c
            probs = [p for _, p in choices]
            assert probs == sorted(probs, reverse=True)
            assert all(p >= CHAR_PROB_FLOOR for p in probs) and sum(probs) <= 1.0 + 1e-3


async def test_decoded_frames_go_as_their_yuv_planes(triton_server: EmbeddedTriton) -> None:
    """The stream opens knowing the model takes ``image_i420``; decoded frames are sent as
    their planes, never converted to BGR in the streamer, and read as usual."""
    recognizer = PlateRecognizer(triton_server.grpc_url, request_timeout_s=120)
    await recognizer.start()
    frames = []
    with av.open(str(YARD_CLIP)) as container:
        for index, picture in enumerate(container.decode(video=0)):
            if index in (20, 40, 60):
                frames.append(
                    Frame("yard", index, index / 15, time.time(), time.monotonic(), picture)
                )
    try:
        await recognizer.wait_ready(30)
        assert recognizer.inputs.i420 and recognizer.inputs.focus
        results = await asyncio.gather(*(recognizer.recognise(f) for f in frames))
    finally:
        await recognizer.close()
    assert all(isinstance(f.pixels, av.VideoFrame) for f in frames)  # no BGR made here
    assert sum("O567AM76" in [p.text for p in plates] for plates in results) >= 2, results


async def test_bad_frame_fails_alone(triton_server: EmbeddedTriton) -> None:
    recognizer = PlateRecognizer(triton_server.grpc_url, request_timeout_s=60)
    await recognizer.start()
    try:
        await recognizer.wait_ready(30)
        bad = recognizer.recognise(_frame(np.zeros((0, 16, 3), np.uint8), 1))
        good = recognizer.recognise(_frame(np.zeros((64, 64, 3), np.uint8), 2))
        results = await asyncio.gather(bad, good, return_exceptions=True)
    finally:
        await recognizer.close()
    assert isinstance(results[0], InferenceError) and "empty" in str(results[0])
    assert results[1] == ()


async def test_deadline_fails_the_frame_instead_of_hanging(triton_server: EmbeddedTriton) -> None:
    recognizer = PlateRecognizer(triton_server.grpc_url, request_timeout_s=0.001)
    await recognizer.start()
    try:
        await recognizer.wait_ready(30)
        with pytest.raises(InferenceError, match="no answer within"):
            await recognizer.recognise(_frame(_car()))
    finally:
        await recognizer.close()
    assert recognizer.stats.timed_out == 1


async def test_triton_restart_fails_in_flight_frames_then_recovers(
    spare_triton: SpareTriton,
) -> None:
    server = await spare_triton.running()
    window = AdaptiveWindow(initial=6, minimum=6, maximum=6, tolerance=1.5)
    recognizer = PlateRecognizer(
        server.grpc_url,
        scheduler=FairScheduler(window, max_per_camera=6),  # all six submitted at once
        request_timeout_s=60,
        reconnect_max_delay_s=1.0,
    )
    try:
        await recognizer.start()
        await recognizer.wait_ready(30)
        car = _car()
        in_flight = [asyncio.create_task(recognizer.recognise(_frame(car, i))) for i in range(6)]
        await asyncio.sleep(0.3)
        started = time.monotonic()
        stopping = asyncio.create_task(server.astop())
        outcomes = await asyncio.gather(*in_flight, return_exceptions=True)
        # Whatever had not been answered failed when Triton went away, not at the deadline.
        assert time.monotonic() - started < 30
        assert any(isinstance(o, InferenceError) for o in outcomes), outcomes
        await stopping
        assert not recognizer.ready

        server = await spare_triton.running()  # on the same port
        await recognizer.wait_ready(30)
        plates = await recognizer.recognise(_frame(car, 99))
        assert any(p.text.startswith("B840") for p in plates)
        assert recognizer.stats.reconnects >= 1
    finally:
        await recognizer.close()
