"""The pipeline's pre/post-processing, outside Triton, on synthetic tensors with known answers."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from converters.paths import import_plate_ops
from tests.footage import YARD_CLIP, encode_yard

plate_ops = import_plate_ops()


def _v8_head(
    boxes_cxcywh: list[tuple[float, ...]], scores: list[float], anchors: int = 200
) -> np.ndarray:
    """YOLOv8 layout [4 + 1 class, anchors]: background anchors score 0.01."""
    head = np.zeros((5, anchors), np.float32)
    head[:4] = np.array([[640], [640], [10], [10]], np.float32)
    head[4] = 0.01
    for i, (box, score) in enumerate(zip(boxes_cxcywh, scores, strict=True)):
        head[:4, 7 + i * 13] = box
        head[4, 7 + i * 13] = score
    return head


def _v5_head(
    boxes_cxcywh: list[tuple[float, ...]], obj: list[float], cls: list[float], anchors: int = 300
) -> np.ndarray:
    """YOLOv5 layout [anchors, 5 + 1 class] with objectness."""
    head = np.zeros((anchors, 6), np.float32)
    head[:, :4] = [640, 640, 10, 10]
    head[:, 4] = 0.02
    head[:, 5] = 0.5
    for i, (box, o, c) in enumerate(zip(boxes_cxcywh, obj, cls, strict=True)):
        head[11 + i * 17, :4] = box
        head[11 + i * 17, 4] = o
        head[11 + i * 17, 5] = c
    return head


def test_v8_head_decodes_known_boxes() -> None:
    head = _v8_head([(100, 200, 40, 20), (500, 300, 60, 30)], [0.9, 0.6])
    assert plate_ops.detect_head_layout(head) == "v8"
    found = plate_ops.decode_head(head, conf_threshold=0.25)
    order = np.argsort(-found.scores)
    np.testing.assert_allclose(found.boxes[order], [[80, 190, 120, 210], [470, 285, 530, 315]])
    np.testing.assert_allclose(found.scores[order], [0.9, 0.6], rtol=1e-6)


def test_v5_head_multiplies_objectness_and_class() -> None:
    head = _v5_head([(100, 200, 40, 20), (500, 300, 60, 30)], obj=[0.9, 0.4], cls=[1.0, 0.5])
    assert plate_ops.detect_head_layout(head) == "v5"
    found = plate_ops.decode_head(head, conf_threshold=0.15)
    # 0.4 * 0.5 = 0.2 survives 0.15; background 0.02 * 0.5 does not.
    assert len(found) == 2
    order = np.argsort(-found.scores)
    np.testing.assert_allclose(found.scores[order], [0.9, 0.2], rtol=1e-6)
    np.testing.assert_allclose(found.boxes[order][1], [470, 285, 530, 315])
    assert len(plate_ops.decode_head(head, conf_threshold=0.25)) == 1


def test_layouts_are_not_confused_when_forced() -> None:
    head = _v8_head([(100, 200, 40, 20)], [0.9])
    with pytest.raises(ValueError, match="unknown head layout"):
        plate_ops.decode_head(head, 0.25, layout="v7")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        plate_ops.detect_head_layout(np.zeros((3, 100), np.float32))


def test_nms_keeps_best_of_overlapping_boxes() -> None:
    head = _v8_head([(100, 200, 40, 20), (102, 201, 40, 20), (500, 300, 60, 30)], [0.8, 0.9, 0.7])
    found = plate_ops.non_max_suppression(plate_ops.decode_head(head, 0.25), 0.45, 10)
    assert len(found) == 2
    np.testing.assert_allclose(found.scores, [0.9, 0.7], rtol=1e-6)
    np.testing.assert_allclose(found.boxes[0], [82, 191, 122, 211])
    assert len(plate_ops.non_max_suppression(plate_ops.decode_head(head, 0.25), 0.45, 1)) == 1


@pytest.mark.parametrize(
    ("frame_hw", "input_hw"),
    [((1080, 1920), (1280, 1280)), ((480, 640), (736, 1280)), ((1280, 1280), (1280, 1280))],
)
def test_letterbox_round_trip_maps_boxes_back(
    frame_hw: tuple[int, int], input_hw: tuple[int, int]
) -> None:
    frame = np.zeros((*frame_hw, 3), np.uint8)
    frame[100:140, 200:300] = (0, 0, 255)  # a red block, BGR
    tensor, transform = plate_ops.letterbox(frame, input_hw)
    assert tensor.shape == (3, *input_hw) and tensor.dtype == np.float32
    assert tensor.min() >= 0.0 and tensor.max() <= 1.0
    # Where the block lands in the input, in RGB: channel 0 is red.
    ys, xs = np.nonzero(tensor[0] > 0.9)
    in_box = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], np.float32)
    back = plate_ops.unletterbox_boxes(in_box, transform, frame_hw)
    np.testing.assert_allclose(back[0], [200, 100, 300, 140], atol=2.5)


def test_unletterbox_clips_to_frame() -> None:
    transform = plate_ops.Letterbox(scale=0.5, pad_x=0, pad_y=10)
    back = plate_ops.unletterbox_boxes(
        np.array([[-20, 0, 700, 60]], np.float32), transform, (100, 1000)
    )
    np.testing.assert_allclose(back[0], [0, 0, 1000, 100])


def test_crop_plates_pads_height_and_normalises() -> None:
    frame = np.full((100, 200, 3), 255, np.uint8)
    frame[40:60, 50:150] = 0  # the "plate": a dark band 20 px high
    crops = plate_ops.crop_plates(frame, np.array([[50, 40, 150, 60]], np.float32), 0.2)
    assert crops.shape == (1, 3, 24, 94)
    # 20 % of 20 px = 4 px of white above and below out of 28 px: ~3.4 rows of 24 at each edge.
    column = crops[0, 0, :, 47]
    assert column[0] == pytest.approx((255 - 127.5) / 128, abs=0.02)
    assert column[12] == pytest.approx(-127.5 / 128, abs=0.02)
    assert column[-1] == pytest.approx((255 - 127.5) / 128, abs=0.02)


def test_crop_outside_frame_gives_neutral_crop() -> None:
    frame = np.zeros((50, 50, 3), np.uint8)
    crops = plate_ops.crop_plates(frame, np.array([[60, 60, 80, 70]], np.float32))
    assert crops.shape == (1, 3, 24, 94)
    assert np.isfinite(crops).all()


def _logits_for(path: str, steps: int = 18) -> np.ndarray:
    """Logits whose best path is ``path`` (one symbol per step, '-' is blank)."""
    assert len(path) == steps
    logits = np.zeros((len(plate_ops.VOCAB), steps), np.float32)
    for t, symbol in enumerate(path):
        logits[plate_ops.VOCAB.index(symbol), t] = 10.0
    return logits


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("BB8--44-00KK1-99-7", "B840K197"),  # repeats collapse
        ("O-5-6-7-A-M-7-6---", "O567AM76"),
        ("--------------A-A-", "AA"),  # a blank separates a doubled letter
        ("------------------", ""),
    ],
)
def test_ctc_greedy_decode(path: str, text: str) -> None:
    texts, scores = plate_ops.ctc_greedy_decode(_logits_for(path)[None])
    assert texts == [text]
    assert 0.99 < scores[0] <= 1.0


def test_ctc_confidence_drops_with_uncertainty() -> None:
    sure = _logits_for("O-5-6-7-A-M-7-6---")
    unsure = sure.copy()
    unsure[plate_ops.VOCAB.index("C"), 0] = 9.9  # O vs C nearly tied at the first step
    texts, scores = plate_ops.ctc_greedy_decode(np.stack([sure, unsure]))
    assert texts == ["O567AM76", "O567AM76"]
    assert scores[1] < scores[0] - 0.02


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (np.zeros((10, 10, 3), np.float32), "UINT8"),
        (np.zeros((10, 10), np.uint8), "HxWx3"),
        (np.zeros((10, 10, 4), np.uint8), "HxWx3"),
        (np.zeros((0, 10, 3), np.uint8), "empty"),
    ],
)
def test_validate_frame_names_the_problem(frame: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plate_ops.validate_frame(frame)


def _frame_of(clip: Path, index: int = 30) -> av.VideoFrame:
    with av.open(str(clip)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i == index:
                return frame
    raise AssertionError(f"{clip.name} has fewer than {index + 1} frames")


@pytest.mark.parametrize("full_range", [True, False])
def test_i420_planes_become_the_bgr_ffmpeg_gives(full_range: bool, tmp_path: Path) -> None:
    """The yard clip decodes as full-range yuvj420p; re-encoded by ffmpeg, the same picture
    is limited-range yuv420p. Either way the BLS's conversion is within 4 levels of FFmpeg's
    own bgr24, and read with the wrong range it is visibly off."""
    clip = YARD_CLIP if full_range else encode_yard(tmp_path / "limited.ts", "[0:v]copy[out]")
    frame = _frame_of(clip)
    assert frame.format.name == ("yuvj420p" if full_range else "yuv420p")
    planes = frame.to_ndarray()
    assert planes.shape == (frame.height * 3 // 2, frame.width)
    bgr = plate_ops.i420_to_bgr(planes, full_range=full_range)
    expected = frame.to_ndarray(format="bgr24")
    difference = np.abs(bgr.astype(np.int16) - expected.astype(np.int16))
    assert bgr.shape == expected.shape and bgr.dtype == np.uint8
    assert difference.max() <= 4 and difference.mean() < 1.5, (difference.max(), difference.mean())
    wrong = plate_ops.i420_to_bgr(planes, full_range=not full_range)
    assert np.abs(wrong.astype(np.int16) - expected.astype(np.int16)).mean() > 3


@pytest.mark.parametrize(
    ("planes", "message"),
    [
        (np.zeros((12, 8), np.float32), "UINT8"),
        (np.zeros((12, 8, 1), np.uint8), "H\\*3/2"),
        (np.zeros((0, 8), np.uint8), "empty"),
        (np.zeros((10, 8), np.uint8), "even"),  # rows not a multiple of 3
        (np.zeros((12, 7), np.uint8), "even"),
    ],
)
def test_validate_i420_names_the_problem(planes: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plate_ops.validate_i420(planes)


def test_char_probabilities_follow_the_best_path() -> None:
    sure = _logits_for("O-5-6-7-A-M-7-6---")
    unsure = _logits_for("BB8--44-00KK1-99-7")
    unsure[plate_ops.VOCAB.index("C"), 0] = 9.5  # the first step doubts B against C
    probs = plate_ops.char_probabilities(np.stack([sure, unsure]))
    texts, _ = plate_ops.ctc_greedy_decode(np.stack([sure, unsure]))
    assert (
        probs.shape == (2, 8, len(plate_ops.ALPHABET))
        and plate_ops.ALPHABET == "0123456789ABEKMHOPCTYX"
    )
    for n, text in enumerate(texts):
        best = "".join(plate_ops.ALPHABET[i] for i in probs[n, : len(text)].argmax(axis=1))
        assert best == text
        np.testing.assert_allclose(probs[n, : len(text)].sum(axis=1), 1.0, rtol=1e-5)
    # B's run is two steps: the doubt of one is averaged over both.
    b, c = plate_ops.ALPHABET.index("B"), plate_ops.ALPHABET.index("C")
    assert 0.55 < probs[1, 0, b] < 0.9 and 0.1 < probs[1, 0, c] < 0.45
    assert probs[1, 1, plate_ops.ALPHABET.index("8")] > 0.99


def test_char_probabilities_of_empty_texts_are_zero_rows() -> None:
    probs = plate_ops.char_probabilities(_logits_for("-" * 18)[None])
    assert probs.shape == (1, 1, len(plate_ops.ALPHABET)) and not probs.any()
    with pytest.raises(ValueError, match="logits"):
        plate_ops.char_probabilities(np.zeros((1, 5, 18), np.float32))
