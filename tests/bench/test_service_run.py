"""bench/service_run.py: RecordingSink (a pass counts once, with its last version's text) and the
capture clock (capture to answer, from the frame's decode)."""

from __future__ import annotations

import dataclasses

import pytest

from bench.service_run import RecordingSink
from tests.webhook_receiver import make_event


async def test_a_correction_replaces_the_pass_text_and_is_no_new_event() -> None:
    sink = RecordingSink()
    first = dataclasses.replace(make_event("gate"), text="C567AM76")
    other = make_event("yard")
    correction = dataclasses.replace(first, text="O567AM76", version=2, previous_text="C567AM76")
    for event in (first, other, correction):
        await sink.publish(event)
    assert sink.texts == ["O567AM76", other.text]
    assert sink.cameras == ["gate", "yard"] and len(sink.latencies_s) == 2
    assert sink.corrections == 1


def test_the_capture_clock_measures_from_the_frames_decode_to_its_answer() -> None:
    import time

    import numpy as np

    from bench.service_run import CaptureClock
    from streamer.domain.frames import Frame, FrameResult

    clock = CaptureClock()
    decoded = time.monotonic() - 0.5  # decoded half a second before its answer arrives
    frame = Frame("gate", 7, 1.4, time.time(), decoded, np.zeros((2, 2, 3), np.uint8))
    clock(FrameResult(frame, ()))
    ((at, seconds),) = clock.answers
    assert 0.5 <= seconds < 1.0
    assert at - seconds == pytest.approx(
        decoded, abs=1e-6
    )  # from the frame's own capture time, not from sending it
