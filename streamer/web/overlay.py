"""The live view's annotation: plate boxes and labels drawn on a frame (pure, CPU work).

Confirmed tracks are drawn green, tentative ones (not yet confirmed, or not
associated with a track) yellow; each box carries a filled label with the
track's text and id, ``O567AM76 #1``: the reported text once the pass is
decided, else the vote so far with a ``?`` (``O567AM76? #1``); under it, smaller,
this frame's own read when it differs. Nothing here touches the input image:
callers run it in a thread (it is CPU work) and get a new array back.

The colours are defined here only: the live page's legend shows :data:`BOX_COLORS`, which
``GET /api/info`` serves.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from streamer.domain.cameras import Snapshot
from streamer.domain.plate_pass import TrackedPlate

#: BGR colours.
CONFIRMED_COLOR = (0, 255, 0)
TENTATIVE_COLOR = (0, 255, 255)
LABEL_TEXT_COLOR = (0, 0, 0)


def css_color(bgr: tuple[int, int, int]) -> str:
    """The CSS ``#rrggbb`` of a BGR colour."""
    blue, green, red = bgr
    return f"#{red:02x}{green:02x}{blue:02x}"


#: The legend of the live view (``box_colors`` of ``GET /api/info``): each box colour drawn
#: into the video, and what it means.
BOX_COLORS = (
    {"kind": "confirmed", "color": css_color(CONFIRMED_COLOR), "meaning": "confirmed track"},
    {
        "kind": "tentative",
        "color": css_color(TENTATIVE_COLOR),
        "meaning": "tentative: not a confirmed track yet",
    },
)
#: Widest picture the live view sends: VP8 and JPEG encoding cost grows with the area.
MAX_WIDTH = 1280

_FONT = cv2.FONT_HERSHEY_SIMPLEX


def label(plate: TrackedPlate) -> str:
    """What the box says: the track's text (``?`` until it is decided) and its id."""
    text = plate.text if plate.decided else f"{plate.text}?"
    return text if plate.track_id is None else f"{text} #{plate.track_id}"


def read_label(plate: TrackedPlate) -> str:
    """The smaller line under the label: this frame's read, when it is not the label's text."""
    return plate.read if plate.read and plate.read != plate.text else ""


def draw(image: np.ndarray, plates: Sequence[TrackedPlate], scale: float = 1.0) -> np.ndarray:
    """A copy of the BGR ``image`` with each plate's box and label drawn.

    ``scale`` maps the plates' frame-pixel boxes onto ``image`` (when ``image``
    is a resized frame).
    """
    out = image.copy()
    height, width = out.shape[:2]
    thickness = max(2, round(width / 640))
    font_scale = max(0.5, width / 1600)
    text_thickness = max(1, round(width / 1280))
    pad = max(2, round(width / 400))
    for plate in plates:
        color = CONFIRMED_COLOR if plate.confirmed else TENTATIVE_COLOR
        x1, y1, x2, y2 = (round(v * scale) for v in plate.box)
        x1, x2 = sorted((min(max(x1, 0), width - 1), min(max(x2, 0), width - 1)))
        y1, y2 = sorted((min(max(y1, 0), height - 1), min(max(y2, 0), height - 1)))
        cv2.rectangle(out, (x1, y1), (x2, y2), color, thickness)

        lines = [(label(plate), font_scale)]
        if read := read_label(plate):
            lines.append((read, font_scale * 0.7))
        sizes = [cv2.getTextSize(t, _FONT, fs, text_thickness) for t, fs in lines]
        label_h = sum(h + baseline for (_, h), baseline in sizes) + (len(lines) + 1) * pad
        label_w = max(w for (w, _), _ in sizes) + 2 * pad
        # Above the box when there is room, else below it.
        top = y1 - thickness // 2 - label_h
        if top < 0:
            top = min(y2 + thickness // 2 + 1, max(height - label_h, 0))
        left = min(max(x1 - thickness // 2, 0), max(width - label_w, 0))
        cv2.rectangle(out, (left, top), (left + label_w, top + label_h), color, cv2.FILLED)
        y = top
        for (text, fs), ((_, text_h), baseline) in zip(lines, sizes, strict=True):
            y += pad + text_h
            cv2.putText(
                out,
                text,
                (left + pad, y),
                _FONT,
                fs,
                LABEL_TEXT_COLOR,
                text_thickness,
                cv2.LINE_AA,
            )
            y += baseline
    return out


def render(snapshot: Snapshot, max_width: int = MAX_WIDTH) -> np.ndarray:
    """The snapshot's frame, at most ``max_width`` wide with even sides, annotated."""
    image = snapshot.frame.image
    height, width = image.shape[:2]
    scale = 1.0
    if width > max_width:
        scale = max_width / width
        size = (max_width & ~1, max(2, round(height * scale)) & ~1)
        image = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
    elif width % 2 or height % 2:
        # 4:2:0 video needs even sides.
        image = image[: height & ~1, : width & ~1]
    return draw(image, snapshot.plates, scale)


def encode_jpeg(image: np.ndarray, quality: int = 80) -> bytes:
    """JPEG bytes of a BGR image (CPU work: call it in a thread)."""
    ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return encoded.tobytes()
