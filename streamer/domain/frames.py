"""What travels through the pipeline: a sampled frame, and the plates read in it."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Decoders' planar YUV 4:2:0 formats (``yuvj420p``: the full-range one, as JPEG uses).
YUV420_FORMATS = ("yuv420p", "yuvj420p")
#: FFmpeg's AVCOL_RANGE_JPEG: a frame's samples are full range (0-255).
AVCOL_RANGE_JPEG = 2
#: No boxes (float32 [0, 4]): a focus with nothing in it yet, a check that found no motion.
NO_BOXES = np.zeros((0, 4), np.float32)


def _full_range(picture: Any) -> bool:
    """Whether a decoded YUV picture's samples are full range (0-255) rather than limited."""
    return bool(picture.format.name == "yuvj420p" or picture.color_range == AVCOL_RANGE_JPEG)


@dataclass(frozen=True, slots=True)
class Frame:
    """One sampled frame of one camera, as decoded.

    ``pts_s`` is the stream's presentation time in seconds (it restarts when a
    camera reconnects or a file loops; ``index`` never does). ``wall_time`` is
    the UTC epoch time at decode and ``monotonic`` the ``time.monotonic()``
    then: staleness and latency use the latter.

    ``pixels`` is the picture: an HxWx3 uint8 BGR array, or a decoded picture
    (a PyAV ``VideoFrame``) that :attr:`image` converts to one on first use, in
    whichever thread asks. A decoded frame is sent to Triton as its YUV 4:2:0
    planes (:meth:`planar_yuv`), so only the live view and the event pictures
    ever convert one; frames wait in half the memory of BGR.
    """

    camera: str
    index: int
    pts_s: float
    wall_time: float
    monotonic: float
    pixels: Any = field(repr=False)
    #: Where in the picture plates can be: x1, y1, x2, y2 rows (float32 [K, 4], frame
    #: pixels) of what moved since the camera's last frame with motion and of its live
    #: plates. None: anywhere (the first frame of a session, no motion gate); the detector
    #: then looks at the whole frame. Triton decides whether regions around them pay.
    focus: np.ndarray | None = field(default=None, repr=False, compare=False)
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

    def planar_yuv(self) -> tuple[np.ndarray, bool] | None:
        """The picture as decoded, when that is planar YUV 4:2:0 of even size: the planes as
        one ``(H * 3 / 2) x W`` uint8 array (I420: Y, then U, then V) and whether its samples
        are full range (0-255). Half the bytes of BGR, and no colour conversion here. None for
        anything else (a BGR array, a picture already converted, another pixel format)."""
        pixels = self._yuv420()
        if pixels is None or pixels.width % 2 or pixels.height % 2:
            return None
        return pixels.to_ndarray(), _full_range(pixels)

    def luma(self) -> tuple[np.ndarray, bool]:
        """The picture's brightness without converting it, for comparing small crops: a
        decoded YUV 4:2:0 frame's Y plane (HxW, a view: no copy) and whether its samples are
        limited range (16-235); otherwise the BGR image (grey crop by crop) and False."""
        pixels = self._yuv420()
        if pixels is None:
            return self.image, False
        plane = pixels.planes[0]
        rows = np.frombuffer(plane, np.uint8).reshape(plane.height, plane.line_size)
        return rows[:, : plane.width], not _full_range(pixels)

    def _yuv420(self) -> Any:
        """The decoded picture while it is planar YUV 4:2:0 (not yet converted), else None."""
        pixels = self.pixels
        if isinstance(pixels, np.ndarray) or pixels.format.name not in YUV420_FORMATS:
            return None
        return pixels

    def looking_also_at(self, boxes: Sequence[np.ndarray | None]) -> Frame:
        """This frame with its focus extended by ``boxes`` (the focus of frames it stands for:
        frames dropped or replaced before they were sent, the camera's tracks). Any None
        (anywhere) makes it None; a frame that looks everywhere already stays as it is."""
        if self.focus is None:
            return self
        if any(b is None for b in boxes):
            return dataclasses.replace(self, focus=None)
        extra = [b for b in boxes if b is not None and len(b)]
        if not extra:
            return self
        return dataclasses.replace(self, focus=np.concatenate([self.focus, *extra]))

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
