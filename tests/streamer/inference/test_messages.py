"""streamer.inference.messages: a plate_recognition answer parsed into PlateReadings."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import InferResult, service_pb2
from tritonclient.utils import serialize_byte_tensor

from streamer.inference.messages import OUTPUTS, is_deadline_error, parse_answer, timeout_us


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
