"""Where in a frame to run the detector: the regions around what matters, or the whole frame.

The streamer sends, with a frame, the boxes where plates can be (``focus``: what moved since
the camera's last frame with motion, and the live plates' latest boxes). When a few squares
of the region detector's input size cover them more cheaply than one whole-frame pass, the
detector runs on those squares only (as Frigate runs its detector on regions around motion
and tracked objects); otherwise, and whenever nothing says where to look, on the whole frame.

Regions are windows of the whole frame's letterboxed detector input, not re-scaled crops of
the frame: a plate is as many pixels for the detector in a region as in the whole frame, the
pixels are the very same, and each window starts on a multiple of the detector's coarsest
stride, so they fall in the same cells of its grid. Cut anywhere else, the same pixels gave a
weak plate (the yard clip's silver car) scores 0.05-0.2 lower; on the grid they differ only
by what the network sees beyond the window's edges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: YOLO's coarsest stride (P5): windows start on multiples of it.
STRIDE = 32
#: A focus box is grown by this share of the region's side on each side before the regions
#: are planned, so what lies around it (the rest of a vehicle that moved, a plate that moved
#: on since its box was taken) stays inside the region, away from its edges.
FOCUS_MARGIN = 0.125
#: Regions are used only while they cost at most this share of one whole-frame pass (by
#: input pixels: the detector's time goes with its input's area). Above it, the whole frame.
MAX_REGION_COST = 0.6


@dataclass(frozen=True)
class Region:
    """A window of the whole frame's detector input, in its pixels."""

    x: int
    y: int
    width: int
    height: int

    def cut(self, image: np.ndarray) -> np.ndarray:
        """The window of the letterboxed frame (HxWx3, ``plate_ops.letterbox_image``)."""
        return image[self.y : self.y + self.height, self.x : self.x + self.width]


def validate_focus(focus: np.ndarray) -> np.ndarray:
    """``focus`` as float64 ``[K, 4]`` boxes (x1, y1, x2, y2), or a ValueError that says why."""
    boxes = np.asarray(focus, dtype=np.float64)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"focus must be [K, 4] boxes (x1, y1, x2, y2), got {list(boxes.shape)}")
    if not np.isfinite(boxes).all():
        raise ValueError("focus boxes must be finite")
    if (boxes[:, 2] < boxes[:, 0]).any() or (boxes[:, 3] < boxes[:, 1]).any():
        raise ValueError("focus boxes must be x1, y1, x2, y2 with x2 >= x1 and y2 >= y1")
    return boxes


def plan_regions(
    focus: np.ndarray,
    full_input_hw: tuple[int, int],
    region_hw: tuple[int, int],
    max_regions: int,
    max_cost: float = MAX_REGION_COST,
) -> list[Region] | None:
    """The windows that cover every ``focus`` box (in the whole frame's detector-input
    pixels), or None for the whole frame.

    None when there is no focus box, when a box (with its margin) is larger than a region,
    or when more than ``max_regions`` (one batch of the region detector) would be needed or
    they would cost more than ``max_cost`` of a whole-frame pass.
    """
    full_h, full_w = full_input_hw
    side_h, side_w = region_hw
    cost = (side_h * side_w) / (full_h * full_w)
    if len(focus) == 0 or (side_h >= full_h and side_w >= full_w) or cost > max_cost:
        return None
    side_h, side_w = min(side_h, full_h), min(side_w, full_w)
    margin_x, margin_y = side_w * FOCUS_MARGIN, side_h * FOCUS_MARGIN
    boxes = focus.astype(np.float64).copy()
    boxes[:, [0, 2]] = (boxes[:, [0, 2]] + [-margin_x, margin_x]).clip(0, full_w)
    boxes[:, [1, 3]] = (boxes[:, [1, 3]] + [-margin_y, margin_y]).clip(0, full_h)
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    clusters: list[np.ndarray] = []  # each the union box (x1, y1, x2, y2) of its members
    for box in boxes[np.argsort(-areas, kind="stable")]:
        if box[2] - box[0] > side_w or box[3] - box[1] > side_h:
            return None
        for i, union in enumerate(clusters):
            merged = np.concatenate(
                [np.minimum(union[:2], box[:2]), np.maximum(union[2:], box[2:])]
            )
            if merged[2] - merged[0] <= side_w and merged[3] - merged[1] <= side_h:
                clusters[i] = merged
                break
        else:
            clusters.append(box)
        if len(clusters) > max_regions or len(clusters) * cost > max_cost:
            return None
    return [
        Region(_origin(x1, x2, side_w, full_w), _origin(y1, y2, side_h, full_h), side_w, side_h)
        for x1, y1, x2, y2 in (cluster.tolist() for cluster in clusters)
    ]


def _origin(low: float, high: float, side: int, limit: int) -> int:
    """Where a window of ``side`` centred on ``low..high`` starts: on the stride grid, inside
    ``0..limit``. Moving it to the grid shifts it by at most half a stride, which the focus
    margin absorbs."""
    centred = (low + high - side) / 2
    return int(min(max(round(centred / STRIDE) * STRIDE, 0), limit - side))
