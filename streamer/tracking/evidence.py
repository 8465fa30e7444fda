"""Whether a plate read is new evidence, or the same image read again.

A vehicle that stops (a barrier, a queue, a parking spot) is read in every
sampled frame, and a still image that is misread is misread the same way each
time: counting those reads as votes lets one wrong image outvote the truth
however many seconds it stands. A read counts as evidence only when its image
is new: when, since the track's last *counted* read,

- the plate moved: its box centre shifted by at least ``min_shift`` of the box
  height, or its height changed by that fraction; or
- the plate's pixels changed: the mean absolute difference of the two plate
  crops, each scaled to ``SIGNATURE_SIZE`` in grey levels (0-255), is at least
  ``min_change``.

The crop is compared at a fixed small size (area-averaged: compression noise
and a pixel of box jitter average out) so that the measure does not depend on
the plate's size in the frame. Compared against the last counted read, not the
previous one, so a slow drift (light, a creeping car) is counted once it adds
up. The thresholds are ``events.evidence_min_change`` / ``evidence_min_shift``
(their defaults: streamer/config/decisions.py); what they mean on real footage,
and how they were chosen: docs/events.md ("Evidence").
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

#: Width x height the plate crop is scaled to before two crops are compared.
SIGNATURE_SIZE = (48, 16)


#: Limited-range luma (16-235, most video) to grey levels 0-255.
_LIMITED_BLACK, _LIMITED_SCALE = 16.0, 255.0 / 219.0


def plate_signature(
    image: np.ndarray, box: tuple[float, float, float, float], limited: bool = False
) -> np.ndarray:
    """The plate's crop of ``image`` (HxWx3 BGR or HxW grey, ``limited``: a limited-range Y
    plane), in grey levels 0-255, scaled to SIGNATURE_SIZE (float32). A box outside the
    image gives a signature of zeros."""
    h, w = image.shape[:2]
    x1, y1, x2, y2 = box
    left, top = min(max(int(x1), 0), w), min(max(int(y1), 0), h)
    right, bottom = min(max(int(np.ceil(x2)), left), w), min(max(int(np.ceil(y2)), top), h)
    crop = image[top:bottom, left:right]
    if crop.size == 0:
        return np.zeros(SIGNATURE_SIZE[::-1], np.float32)
    if crop.ndim == 3:
        crop = cv2.cvtColor(crop, cv2.COLOR_BGR2GRAY)
    small = cv2.resize(crop, SIGNATURE_SIZE, interpolation=cv2.INTER_AREA).astype(np.float32)
    if limited:
        small = (small - _LIMITED_BLACK) * _LIMITED_SCALE
    return small


@dataclass(frozen=True, slots=True)
class Sample:
    """A counted read, as later reads are compared with it: its box and its crop's signature."""

    box: tuple[float, float, float, float]
    signature: np.ndarray

    @classmethod
    def of(
        cls, image: np.ndarray, box: tuple[float, float, float, float], limited: bool = False
    ) -> Sample:
        return cls(box, plate_signature(image, box, limited))


def box_shift(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    """How far a plate moved from box ``a`` to box ``b``: the larger of the centre's shift and
    the change of height, as a fraction of ``a``'s height."""
    ax1, ay1, ax2, ay2 = a
    bx1, by1, bx2, by2 = b
    height = max(ay2 - ay1, 1.0)
    centre = float(np.hypot((bx1 + bx2 - ax1 - ax2) / 2, (by1 + by2 - ay1 - ay2) / 2))
    return max(centre, abs((by2 - by1) - (ay2 - ay1))) / height


def image_change(last: Sample, image: np.ndarray, limited: bool = False) -> float:
    """Mean absolute grey-level difference (0-255) between the last counted read's crop and
    ``image`` in the same box. The same box, not the new read's: the detector's box jitters by
    a pixel on a still image, and a crop shifted by a pixel differs more than the picture."""
    return float(np.mean(np.abs(last.signature - plate_signature(image, last.box, limited))))


def is_new(
    last: Sample | None,
    image: np.ndarray,
    box: tuple[float, float, float, float],
    min_change: float,
    min_shift: float,
    limited: bool = False,
) -> bool:
    """Whether a read of the plate at ``box`` in ``image`` (``limited``: see
    :func:`plate_signature`) is new evidence after the track's last counted read ``last``
    (None: nothing counted yet). ``min_change`` / ``min_shift``:
    ``events.evidence_min_change`` / ``evidence_min_shift`` (0 and 0: every read is new)."""
    if last is None:
        return True
    return box_shift(last.box, box) >= min_shift or image_change(last, image, limited) >= min_change
