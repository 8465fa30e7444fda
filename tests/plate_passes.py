"""A decided pass built by hand, for tests of what the delivery stage makes of it."""

from __future__ import annotations

import time

import numpy as np

from streamer.domain.frames import Frame, PlateReading
from streamer.domain.known_plates import Match
from streamer.domain.plate_pass import PlatePass

EVENT_ID = "5f0c7b1e-3d4a-4c1e-9a57-0d2b8f6e1a93"


def a_pass(
    version: int = 1, previous_text: str | None = None, match: Match | None = None
) -> PlatePass:
    image = np.zeros((100, 200, 3), np.uint8)
    image[40:60, 50:150] = (255, 255, 255)  # the "plate"
    frame = Frame("gate", 7, 12.5, 1_767_225_600.25, time.monotonic(), image)
    empty = Frame("gate", 3, 11.0, 1_767_225_598.75, frame.monotonic - 1.5, np.zeros((0, 0, 3)))
    reading = PlateReading((50.0, 40.0, 150.0, 60.0), 0.7, "O567AM76", 0.95)
    return PlatePass(
        camera="gate",
        track_id=4,
        text="O567AM76",
        confidence=0.9,
        candidates=[("O567AM76", 0.9), ("C567AM76", 0.1)],
        reads=12,
        evidence=6,
        support=5.5,
        exact=10,
        first_seen=empty,
        last_seen=frame,
        best=reading,
        best_frame=frame,
        reason="confident",
        time_s=12.5,
        event_id=EVENT_ID,
        version=version,
        previous_text=previous_text,
        match=match,
        voted_text="C567AC76" if match is not None and match.snap else None,
    )
