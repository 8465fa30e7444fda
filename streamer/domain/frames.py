"""What travels through the pipeline: a sampled frame, and the plates read in it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class Frame:
    """One sampled frame of one camera, as decoded.

    ``pts_s`` is the stream's presentation time in seconds (it restarts when a
    camera reconnects or a file loops; ``index`` never does). ``wall_time`` is
    the UTC epoch time at decode and ``monotonic`` the ``time.monotonic()``
    then: staleness and latency use the latter.

    ``pixels`` is the picture: an HxWx3 uint8 BGR array, or a decoded picture
    (a PyAV ``VideoFrame``) that :attr:`image` converts to one on first use, in
    whichever thread asks. Under overload most sampled frames are replaced by
    newer ones before their turn at Triton; converted lazily, those never pay
    for the 1080p BGR conversion (and wait in half the memory, as YUV).
    """

    camera: str
    index: int
    pts_s: float
    wall_time: float
    monotonic: float
    pixels: Any = field(repr=False)
    _lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    @property
    def image(self) -> np.ndarray:
        """The picture as HxWx3 uint8 BGR (converted once, the first time it is asked for)."""
        pixels = self.pixels
        if isinstance(pixels, np.ndarray):
            return pixels
        with self._lock:
            if not isinstance(self.pixels, np.ndarray):
                # frozen: the one field that changes, from the picture to its BGR array
                object.__setattr__(self, "pixels", self.pixels.to_ndarray(format="bgr24"))
            image: np.ndarray = self.pixels
            return image

    @property
    def height(self) -> int:
        pixels = self.pixels
        return int(pixels.shape[0] if isinstance(pixels, np.ndarray) else pixels.height)

    @property
    def width(self) -> int:
        pixels = self.pixels
        return int(pixels.shape[1] if isinstance(pixels, np.ndarray) else pixels.width)


#: Per position of a text, the characters it could be with their probabilities.
CharProbs = tuple[tuple[tuple[str, float], ...], ...]
#: Character probabilities below this are not kept in ``PlateReading.char_probs``.
CHAR_PROB_FLOOR = 0.01


@dataclass(frozen=True, slots=True)
class PlateReading:
    """One plate found in one frame by the ``plate_recognition`` model."""

    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in frame pixels
    det_score: float
    text: str
    text_score: float
    #: Per character of ``text``, what it could be: ``(character, probability)`` pairs,
    #: most likely first, the unlikely ones (< ``CHAR_PROB_FLOOR``) left out. None: only
    #: the text is known (each character then counts as certain).
    char_probs: CharProbs | None = None

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
