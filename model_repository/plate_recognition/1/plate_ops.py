"""Pre- and post-processing of the plate pipeline: numpy and OpenCV only.

This one module is imported by the BLS model (``model.py`` beside it, inside
Triton), by the converters (to check an exported detector) and by the tests,
so that what runs inside Triton is tested outside it too. It must not import
torch or anything from the project: the Triton container only has numpy and
OpenCV.

Pipeline for one frame (BGR, or planar YUV 4:2:0 turned into BGR by ``i420_to_bgr``):
    letterbox -> detector -> decode_detections (v5 or v8 head) -> NMS
    -> crop_plates (5 % height padding, 94x24 cubic, normalised)
    -> stn -> lprnet -> ctc_greedy_decode
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import cv2
import numpy as np

#: LPRNet vocabulary: Latin look-alikes of the Cyrillic plate letters; the
#: last symbol is the CTC blank.
VOCAB = "0123456789ABEKMHOPCTYX-"
BLANK_INDEX = len(VOCAB) - 1
#: LPRNet input, width x height, as OpenCV sizes are given.
PLATE_SIZE_WH = (94, 24)
#: The seed pipeline padded its boxes by this fraction of their height above and below.
SEED_PAD_RATIO = 0.2
#: The detector's boxes are padded by this fraction of their height above and below. They
#: already hold a margin round the characters (the seed's boxes did not), and padded by the
#: seed's 0.2 the recogniser misreads them: the yard clip's black car reads C567AM76 instead
#: of O567AM76 in most frames once re-encoded or scaled, the van B840OK197. At 0.05 both
#: read right in nearly every frame (`python -m bench.crop_padding`, docs/ACCURACY.md).
CROP_PAD_RATIO = 0.05
#: Ultralytics letterboxes with this grey.
LETTERBOX_PAD_VALUE = 114

HeadLayout = Literal["auto", "v5", "v8"]


@dataclass(frozen=True)
class Letterbox:
    """How a frame was fitted into the detector input: ``input = frame * scale + pad``."""

    scale: float
    pad_x: float
    pad_y: float


@dataclass
class Detections:
    """Parallel arrays, one row per detection, boxes as x1, y1, x2, y2."""

    boxes: np.ndarray  # float32 [N, 4]
    scores: np.ndarray  # float32 [N]
    class_ids: np.ndarray  # int64 [N]

    def __post_init__(self) -> None:
        n = len(self.scores)
        if self.boxes.shape != (n, 4) or self.class_ids.shape != (n,):
            raise ValueError(
                f"inconsistent detections: boxes {self.boxes.shape}, "
                f"scores {self.scores.shape}, class_ids {self.class_ids.shape}"
            )

    def __len__(self) -> int:
        return len(self.scores)

    @classmethod
    def empty(cls) -> Detections:
        return cls(
            np.zeros((0, 4), np.float32), np.zeros((0,), np.float32), np.zeros((0,), np.int64)
        )

    def select(self, index: np.ndarray) -> Detections:
        return Detections(self.boxes[index], self.scores[index], self.class_ids[index])

    @classmethod
    def concatenate(cls, parts: list[Detections]) -> Detections:
        if not parts:
            return cls.empty()
        return cls(
            np.concatenate([p.boxes for p in parts]),
            np.concatenate([p.scores for p in parts]),
            np.concatenate([p.class_ids for p in parts]),
        )


def validate_frame(frame: np.ndarray) -> None:
    """Raise ``ValueError`` naming the problem unless ``frame`` is a non-empty HxWx3 uint8 image."""
    if frame.dtype != np.uint8:
        raise ValueError(f"image must be UINT8, got {frame.dtype}")
    if frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(f"image must be HxWx3 (BGR), got shape {list(frame.shape)}")
    if frame.shape[0] == 0 or frame.shape[1] == 0:
        raise ValueError(f"image is empty: shape {list(frame.shape)}")


def validate_i420(planes: np.ndarray) -> None:
    """Raise ``ValueError`` naming the problem unless ``planes`` is a planar YUV 4:2:0 (I420)
    frame: uint8, ``(H * 3 / 2) x W`` (the Y plane, then U, then V), H and W even, not empty."""
    if planes.dtype != np.uint8:
        raise ValueError(f"image_i420 must be UINT8, got {planes.dtype}")
    if planes.ndim != 2:
        raise ValueError(f"image_i420 must be (H*3/2)xW, got shape {list(planes.shape)}")
    rows, width = planes.shape
    if rows == 0 or width == 0:
        raise ValueError(f"image_i420 is empty: shape {list(planes.shape)}")
    if rows % 3 or width % 2:  # (rows = 3k: H = 2k, even)
        raise ValueError(
            f"image_i420 must be (H*3/2)xW with H and W even (I420), got {list(planes.shape)}"
        )


#: Full range (0-255, "JPEG", PyAV's ``yuvj420p``) to limited range (16-235 luma, 16-240
#: chroma): OpenCV's YUV 4:2:0 conversion takes limited range only.
_LUMA_TO_LIMITED = np.round(np.arange(256) * 219 / 255 + 16).astype(np.uint8)
_CHROMA_TO_LIMITED = np.round((np.arange(256) - 128) * 224 / 255 + 128).astype(np.uint8)


def i420_to_bgr(planes: np.ndarray, full_range: bool = False) -> np.ndarray:
    """A planar YUV 4:2:0 frame (see ``validate_i420``) as HxWx3 uint8 BGR.

    BT.601 coefficients, as FFmpeg uses for untagged video; ``full_range`` for 0-255 samples.
    Within 4 levels (1 on average) of what FFmpeg's own conversion (PyAV's ``bgr24``) gives
    for the same picture; for BT.709-tagged video, which FFmpeg converts as such, within 15
    (1.1 on average).
    """
    validate_i420(planes)
    if full_range:
        height = planes.shape[0] * 2 // 3
        limited = np.empty_like(planes)
        cv2.LUT(planes[:height], _LUMA_TO_LIMITED, dst=limited[:height])
        cv2.LUT(planes[height:], _CHROMA_TO_LIMITED, dst=limited[height:])
        planes = limited
    bgr: np.ndarray = cv2.cvtColor(planes, cv2.COLOR_YUV2BGR_I420)
    return bgr


def letterbox(frame_bgr: np.ndarray, input_hw: tuple[int, int]) -> tuple[np.ndarray, Letterbox]:
    """Fit a BGR frame into ``input_hw`` keeping its aspect ratio, as Ultralytics does.

    Returns the detector input (float32, 3xHxW, RGB, 0..1) and the transform.
    """
    padded, transform = letterbox_image(frame_bgr, input_hw)
    return to_input(padded), transform


def letterbox_image(
    frame_bgr: np.ndarray, input_hw: tuple[int, int]
) -> tuple[np.ndarray, Letterbox]:
    """The letterboxed frame as an image (uint8, HxWx3, BGR), before :func:`to_input`: a
    window of it gives the very pixels of the same window of the whole input."""
    in_h, in_w = input_hw
    h, w = frame_bgr.shape[:2]
    scale = min(in_h / h, in_w / w)
    new_w, new_h = round(w * scale), round(h * scale)
    pad_x, pad_y = (in_w - new_w) / 2, (in_h - new_h) / 2
    if (new_w, new_h) != (w, h):
        resized = cv2.resize(frame_bgr, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    else:
        resized = frame_bgr
    top, left = round(pad_y - 0.1), round(pad_x - 0.1)
    bottom, right = in_h - new_h - top, in_w - new_w - left
    padded = cv2.copyMakeBorder(
        resized, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(LETTERBOX_PAD_VALUE,) * 3
    )
    return padded, Letterbox(scale=scale, pad_x=float(left), pad_y=float(top))


def to_input(image_bgr: np.ndarray) -> np.ndarray:
    """A BGR image (uint8, HxWx3) as the detector's input: float32, 3xHxW, RGB, 0..1."""
    rgb = cv2.cvtColor(np.ascontiguousarray(image_bgr), cv2.COLOR_BGR2RGB)
    tensor = np.ascontiguousarray(rgb.transpose(2, 0, 1), dtype=np.float32)
    tensor *= 1.0 / 255.0
    return tensor


def detect_head_layout(output: np.ndarray) -> Literal["v5", "v8"]:
    """Tell the YOLO head layout from one image's raw output (2-D, batch dim removed).

    YOLOv8 (anchor-free): ``[4 + classes, anchors]``, no objectness.
    YOLOv5 (anchor-based): ``[anchors, 5 + classes]``, with objectness.
    Anchors always outnumber channels by far, so the longer axis is the anchor axis.
    """
    if output.ndim != 2:
        raise ValueError(f"detector output must be 2-D per image, got shape {list(output.shape)}")
    rows, cols = output.shape
    if rows < cols:
        if rows < 5:
            raise ValueError(f"YOLOv8 head needs >= 5 channels, got shape {list(output.shape)}")
        return "v8"
    if cols < 6:
        raise ValueError(f"YOLOv5 head needs >= 6 channels, got shape {list(output.shape)}")
    return "v5"


def decode_head(
    output: np.ndarray, conf_threshold: float, layout: HeadLayout = "auto"
) -> Detections:
    """One image's raw head output -> scored xyxy boxes in detector input pixels, pre-NMS."""
    if layout == "auto":
        layout = detect_head_layout(output)
    if layout == "v8":
        rows = output.T  # [anchors, 4 + classes]
        class_scores = rows[:, 4:]
    elif layout == "v5":
        rows = output  # [anchors, 5 + classes]
        class_scores = rows[:, 5:] * rows[:, 4:5]
    else:
        raise ValueError(f"unknown head layout {layout!r}")
    class_ids = class_scores.argmax(axis=1)
    scores = class_scores[np.arange(len(class_ids)), class_ids]
    keep = scores >= conf_threshold
    cxcywh = rows[keep, :4].astype(np.float32)
    boxes = np.empty_like(cxcywh)
    boxes[:, 0] = cxcywh[:, 0] - cxcywh[:, 2] / 2
    boxes[:, 1] = cxcywh[:, 1] - cxcywh[:, 3] / 2
    boxes[:, 2] = cxcywh[:, 0] + cxcywh[:, 2] / 2
    boxes[:, 3] = cxcywh[:, 1] + cxcywh[:, 3] / 2
    return Detections(boxes, scores[keep].astype(np.float32), class_ids[keep].astype(np.int64))


def non_max_suppression(
    detections: Detections, iou_threshold: float, max_detections: int
) -> Detections:
    """Class-aware NMS with OpenCV's ``NMSBoxesBatched``; result sorted by score."""
    if len(detections) == 0:
        return detections
    xywh = detections.boxes.copy()
    xywh[:, 2:] -= xywh[:, :2]
    keep = cv2.dnn.NMSBoxesBatched(
        xywh.tolist(),
        detections.scores.tolist(),
        detections.class_ids.astype(np.int32).tolist(),
        0.0,
        iou_threshold,
    )
    keep = np.asarray(keep, dtype=np.int64).reshape(-1)
    keep = keep[np.argsort(-detections.scores[keep], kind="stable")][:max_detections]
    return detections.select(keep)


def unletterbox_boxes(
    boxes: np.ndarray, transform: Letterbox, frame_hw: tuple[int, int]
) -> np.ndarray:
    """Map boxes from detector input pixels back to frame pixels, clipped to the frame."""
    out = boxes.astype(np.float32).copy()
    out[:, [0, 2]] = (out[:, [0, 2]] - transform.pad_x) / transform.scale
    out[:, [1, 3]] = (out[:, [1, 3]] - transform.pad_y) / transform.scale
    h, w = frame_hw
    out[:, [0, 2]] = out[:, [0, 2]].clip(0, w)
    out[:, [1, 3]] = out[:, [1, 3]].clip(0, h)
    return out


def crop_plates(
    frame_bgr: np.ndarray, boxes: np.ndarray, pad_ratio: float = CROP_PAD_RATIO
) -> np.ndarray:
    """Crop each box and preprocess it for the STN, as the seed pipeline did.

    The box is padded by ``pad_ratio`` of its height above and below, cut with
    integer truncation, resized to 94x24 with cubic interpolation and scaled to
    ``(pixel - 127.5) / 128``, channels first, BGR. Returns float32 [N, 3, 24, 94].
    """
    h, w = frame_bgr.shape[:2]
    out = np.empty((len(boxes), 3, PLATE_SIZE_WH[1], PLATE_SIZE_WH[0]), np.float32)
    for i, (x1, y1, x2, y2) in enumerate(boxes.tolist()):
        pad = (y2 - y1) * pad_ratio
        left, right = int(max(x1, 0)), int(min(x2, w))
        top, bottom = int(max(y1 - pad, 0)), int(min(y2 + pad, h))
        right, bottom = max(right, left + 1), max(bottom, top + 1)
        crop = frame_bgr[top:bottom, left:right]
        if crop.size == 0:  # box entirely outside the frame: feed a grey plate
            out[i] = 0.0
            continue
        resized = cv2.resize(crop, PLATE_SIZE_WH, interpolation=cv2.INTER_CUBIC)
        out[i] = (resized.transpose(2, 0, 1).astype(np.float32) - 127.5) * 0.0078125
    return out


def ctc_greedy_decode(logits: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Best-path CTC decoding of LPRNet logits ``[N, classes, steps]``.

    Returns the texts and a confidence per text: the geometric mean over the
    time steps of the softmax probability of the chosen symbol (blanks
    included, so an uncertain gap lowers it as much as an uncertain character).
    """
    if logits.ndim != 3 or logits.shape[1] != len(VOCAB):
        raise ValueError(
            f"LPRNet logits must be [N, {len(VOCAB)}, steps], got {list(logits.shape)}"
        )
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    best = log_probs.argmax(axis=1)  # [N, steps]
    best_log_prob = np.take_along_axis(log_probs, best[:, None, :], axis=1)[:, 0, :]
    confidences = np.exp(best_log_prob.mean(axis=1)).astype(np.float32)
    texts = []
    for path in best.tolist():
        chars = []
        previous = BLANK_INDEX
        for symbol in path:
            if symbol != previous and symbol != BLANK_INDEX:
                chars.append(VOCAB[symbol])
            previous = symbol
        texts.append("".join(chars))
    return texts, confidences


#: The characters ``char_probabilities`` gives a probability for, in its column order.
ALPHABET = VOCAB[:BLANK_INDEX]


def char_probabilities(logits: np.ndarray) -> np.ndarray:
    """Per-character probabilities of the best-path texts of ``ctc_greedy_decode``.

    Each character of a best-path text comes from a run of time steps whose most
    likely symbol is that character; its row is the softmax averaged over those
    steps, blank left out and renormalised over ``ALPHABET``: what the network
    thought that character could be (``O`` 0.6, ``C`` 0.3, ...). This is the CTC
    alignment of the best path, so row ``i`` belongs to character ``i`` of the text.

    Returns float32 ``[N, L, len(ALPHABET)]``, ``L`` the longest text (at least 1);
    the rows past a text's length are zeros.
    """
    if logits.ndim != 3 or logits.shape[1] != len(VOCAB):
        raise ValueError(
            f"LPRNet logits must be [N, {len(VOCAB)}, steps], got {list(logits.shape)}"
        )
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted)
    probs /= probs.sum(axis=1, keepdims=True)  # [N, classes, steps]
    best = probs.argmax(axis=1)  # [N, steps]
    rows: list[list[np.ndarray]] = []
    for n, path in enumerate(best.tolist()):
        runs: list[list[int]] = []
        previous = BLANK_INDEX
        for t, symbol in enumerate(path):
            if symbol != BLANK_INDEX:
                if symbol != previous:
                    runs.append([t])
                else:
                    runs[-1].append(t)
            previous = symbol
        plate = []
        for steps in runs:
            row = probs[n, :BLANK_INDEX, steps].mean(axis=0)
            plate.append(row / max(float(row.sum()), 1e-12))
        rows.append(plate)
    out = np.zeros((len(rows), max([1, *map(len, rows)]), len(ALPHABET)), np.float32)
    for n, plate in enumerate(rows):
        if plate:
            out[n, : len(plate)] = plate
    return out
