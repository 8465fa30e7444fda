"""What travels through the pipeline: a sampled frame, and the plates read in it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class Frame:
    """One sampled frame of one camera, as decoded.

    ``pts_s`` is the stream's presentation time in seconds (it restarts when a
    camera reconnects or a file loops; ``index`` never does). ``wall_time`` is
    the UTC epoch time at decode and ``monotonic`` the ``time.monotonic()``
    then: staleness and latency use the latter.
    """

    camera: str
    index: int
    pts_s: float
    wall_time: float
    monotonic: float
    image: np.ndarray = field(repr=False)  # HxWx3 uint8, BGR

    @property
    def height(self) -> int:
        return int(self.image.shape[0])

    @property
    def width(self) -> int:
        return int(self.image.shape[1])


@dataclass(frozen=True, slots=True)
class PlateReading:
    """One plate found in one frame by the ``plate_recognition`` model."""

    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in frame pixels
    det_score: float
    text: str
    text_score: float

    @property
    def width(self) -> float:
        return self.box[2] - self.box[0]

    @property
    def height(self) -> float:
        return self.box[3] - self.box[1]


@dataclass(frozen=True, slots=True)
class FrameResult:
    """A frame and what the model read in it (already filtered by ROI and size)."""

    frame: Frame
    plates: tuple[PlateReading, ...]
