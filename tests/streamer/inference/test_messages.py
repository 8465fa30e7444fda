"""streamer.inference.messages: a frame as the model's input (its decoded planes where it
can), and a plate_recognition answer parsed into PlateReadings."""

from __future__ import annotations

import time
from collections.abc import Callable

import av
import numpy as np
import pytest
from tritonclient.grpc import InferResult, service_pb2
from tritonclient.utils import serialize_byte_tensor

from streamer.domain.frames import AVCOL_RANGE_JPEG, Frame
from streamer.inference.messages import (
    I420_INPUT,
    OUTPUTS,
    ModelInputs,
    focus_input,
    frame_request,
    image_input,
    is_deadline_error,
    parse_answer,
    timeout_us,
)
from tests.footage import YARD_CLIP


def _response(names: tuple[str, ...]) -> InferResult:
    """An answer of the plate_recognition model with one plate and only ``names`` in it."""
    values = {
        "boxes": ("FP32", np.array([[1, 2, 30, 12]], np.float32)),
        "det_scores": ("FP32", np.array([0.7], np.float32)),
        "texts": ("BYTES", np.array([b"A1"], np.object_)),
        "text_scores": ("FP32", np.array([0.9], np.float32)),
        "char_probs": ("FP32", np.array([[[0.8, 0.0, 0.2], [0.005, 0.995, 0.0]]], np.float32)),
        "alphabet": ("BYTES", np.array([b"A1H"], np.object_)),
    }
    response = service_pb2.ModelInferResponse()
    for name in names:
        datatype, value = values[name]
        response.outputs.add(name=name, datatype=datatype, shape=value.shape)
        raw = serialize_byte_tensor(value).item() if datatype == "BYTES" else value.tobytes()
        response.raw_output_contents.append(raw)
    return InferResult(response)


def test_parse_keeps_the_likely_characters_of_each_position() -> None:
    (plate,) = parse_answer(_response(OUTPUTS))
    assert (plate.text, plate.box) == ("A1", (1.0, 2.0, 30.0, 12.0))
    assert plate.det_score == pytest.approx(0.7)
    assert plate.char_probs == ((("A", 0.8), ("H", 0.2)), (("1", 0.995),))


def test_parse_says_when_the_model_repository_is_too_old() -> None:
    with pytest.raises(ValueError, match=r"missing outputs char_probs, alphabet.*make models"):
        parse_answer(_response(OUTPUTS[:4]))


@pytest.mark.parametrize(
    ("error", "deadline"),
    [
        ("plate_recognition: deadline exceeded before the detector", True),
        ("Request timeout expired", True),
        ("RuntimeError: boom", False),
        ("", False),
    ],
)
def test_deadline_errors_are_told_from_model_failures(error: str, deadline: bool) -> None:
    assert is_deadline_error(error) is deadline


def test_the_request_timeout_is_what_is_left_in_microseconds_and_never_none() -> None:
    assert timeout_us(1.5) == 1_500_000
    assert timeout_us(1e-9) == 1  # 0 would tell Triton: no timeout


def _decoded(pixel_format: str | None = None, size: tuple[int, int] | None = None) -> Frame:
    """Frame 30 of the yard clip as the decoder gives it (full-range yuvj420p, 1920x1080),
    or reformatted to ``pixel_format`` and ``size``."""
    with av.open(str(YARD_CLIP)) as container:
        for index, picture in enumerate(container.decode(video=0)):
            if index == 30:
                if pixel_format or size:
                    width, height = size or (picture.width, picture.height)
                    picture = picture.reformat(width, height, pixel_format or picture.format.name)
                return Frame("yard", index, index / 15, time.time(), time.monotonic(), picture)
    raise AssertionError("yard_cam.ts is shorter than 31 frames")


def test_a_decoded_yuv420_frame_goes_as_its_planes_in_half_the_bytes_of_bgr() -> None:
    frame = _decoded()
    planar = image_input(frame, i420=True)
    assert planar.tensor.name() == I420_INPUT and planar.tensor.shape() == [1620, 1920]
    assert planar.parameters == {"yuv_range": "full"}  # the clip is yuvj420p
    assert isinstance(frame.pixels, av.VideoFrame)  # not converted to BGR on the way
    bgr = image_input(frame, i420=False)  # a model repository without image_i420
    assert bgr.tensor.name() == "image" and bgr.tensor.shape() == [1080, 1920, 3]
    assert bgr.parameters is None
    assert len(planar.tensor._get_content()) * 2 == len(bgr.tensor._get_content())
    request = frame_request("plate_recognition", "yard:30:0", planar)
    assert request["parameters"] == {"yuv_range": "full"}
    assert request["inputs"] == [planar.tensor]


def test_the_yuv_range_follows_the_frame() -> None:
    """yuv420p that FFmpeg marks full range is full range; plain yuv420p is limited."""
    tagged = _decoded("yuv420p")
    assert tagged.pixels.color_range == AVCOL_RANGE_JPEG
    assert image_input(tagged, i420=True).parameters == {"yuv_range": "full"}
    picture = av.VideoFrame.from_ndarray(np.full((4, 6), 128, np.uint8), format="gray")
    plain = Frame("x", 0, 0.0, 0.0, 0.0, picture.reformat(format="yuv420p"))
    sent = image_input(plain, i420=True)
    assert sent.tensor.name() == I420_INPUT and sent.parameters is None


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(lambda: _decoded("nv12"), id="nv12"),
        pytest.param(lambda: _decoded(size=(641, 361)), id="odd size"),
        pytest.param(
            lambda: Frame("x", 0, 0.0, 0.0, 0.0, np.zeros((8, 8, 3), np.uint8)), id="bgr array"
        ),
    ],
)
def test_other_pictures_go_as_bgr(frame: Callable[[], Frame]) -> None:
    picture = frame()
    sent = image_input(picture, i420=True)
    assert sent.tensor.name() == "image" and sent.parameters is None
    assert sent.tensor.shape() == [picture.height, picture.width, 3]


def test_the_optional_inputs_are_read_from_the_model_metadata() -> None:
    image = {"name": "image", "datatype": "UINT8", "shape": ["-1", "-1", "3"]}
    planes = {"name": "image_i420", "datatype": "UINT8", "shape": ["-1", "-1"]}
    focus = {"name": "focus", "datatype": "FP32", "shape": ["-1", "4"]}
    every = ModelInputs.of({"name": "plate_recognition", "inputs": [image, planes, focus]})
    assert every == ModelInputs(i420=True, focus=True)
    assert ModelInputs.of({"name": "plate_recognition", "inputs": [image]}) == ModelInputs()


def test_a_frames_focus_goes_as_its_boxes_and_none_goes_without() -> None:
    picture = np.zeros((48, 64, 3), np.uint8)
    boxes = np.array([[1, 2, 30, 40], [5, 6, 7, 8]], np.float32)
    with_focus = Frame("cam", 0, 0.0, 0.0, 0.0, picture, focus=boxes)
    tensor = focus_input(with_focus)
    assert tensor is not None and tensor.name() == "focus" and tensor.datatype() == "FP32"
    assert tensor.shape() == [2, 4]
    request = frame_request("plate_recognition", "cam:0:0", image_input(with_focus, False), tensor)
    assert [t.name() for t in request["inputs"]] == ["image", "focus"]
    # No focus (anywhere), or no boxes yet: no input, so the model looks at the whole frame.
    for focus in (None, np.zeros((0, 4), np.float32)):
        assert focus_input(Frame("cam", 0, 0.0, 0.0, 0.0, picture, focus=focus)) is None
