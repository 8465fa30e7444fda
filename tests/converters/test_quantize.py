"""``--precision int8``: the detector quantised by NNCF on the shared footage, its head's
decoding left in fp32, the recognisers untouched; a quantisation that disagrees with fp32
too often is refused and leaves the fp32 model in place."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from converters import quantize
from converters.cli import main
from converters.errors import ConversionError
from converters.model_config import load_config
from converters.paths import import_plate_ops

TENSOR_MODELS = ("detector", "stn", "lprnet")


def _op_types(xml: Path) -> set[str]:
    return {op.get_type_name() for op in ov.Core().read_model(str(xml)).get_ordered_ops()}


def _quantised_ops(xml: Path) -> set[str]:
    """The names of the ops that read a FakeQuantize's output (those run in INT8)."""
    model = ov.Core().read_model(str(xml))
    names = set()
    for op in model.get_ordered_ops():
        if op.get_type_name() != "FakeQuantize":
            continue
        for output in op.outputs():
            for target in output.get_target_inputs():
                node = target.get_node()
                if node.get_type_name() != "ShapeOf":  # (reads the shape, not the values)
                    names.add(node.get_friendly_name())
    return names


def _input_hw(xml: Path) -> tuple[int, int]:
    shape = ov.Core().read_model(str(xml)).input(0).get_partial_shape()
    return shape[2].get_length(), shape[3].get_length()  # (the batch axis is dynamic)


@pytest.fixture(scope="module")
def fp32_detector(openvino_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fp32-detector")
    for name in ("model.xml", "model.bin"):
        shutil.copyfile(openvino_repository / "detector" / "1" / name, folder / name)
    return folder / "model.xml"


def test_the_detector_is_quantised_and_its_head_decodes_in_fp32(
    fp32_detector: Path, tmp_path: Path
) -> None:
    xml = tmp_path / "model.xml"
    shutil.copyfile(fp32_detector, xml)
    shutil.copyfile(fp32_detector.with_suffix(".bin"), xml.with_suffix(".bin"))
    height, width = _input_hw(xml)
    inputs = quantize.calibration_inputs((int(height), int(width)))
    assert len(inputs) == 31 and inputs[0].shape == (1, 3, height, width)
    lines: list[str] = []
    agreement = quantize.quantize_detector(xml, inputs, lines.append)
    assert agreement.frames == 31
    assert agreement.same_count >= 0.85 * 31 and agreement.median_shift_px < 2.0
    assert any("INT8 finds the same plate count" in line for line in lines)
    assert "FakeQuantize" in _op_types(xml) and "FakeQuantize" not in _op_types(fp32_detector)
    size = xml.with_suffix(".bin").stat().st_size
    assert size < 0.5 * fp32_detector.with_suffix(".bin").stat().st_size  # INT8 weights
    quantised = _quantised_ops(xml)
    assert any("/conv/Conv" in name for name in quantised)  # the backbone's convolutions...
    head = [n for n in quantised if any(re.fullmatch(p, n) for p in quantize.HEAD_PATTERNS)]
    assert head == []  # ...not the head's decoding

    # The black car's plate, found alike by both in the clip's first frame.
    plate_ops = import_plate_ops()
    core = ov.Core()
    boxes = []
    for model in (fp32_detector, xml):
        compiled = core.compile_model(str(model), "CPU", {"INFERENCE_NUM_THREADS": "1"})
        head_out = np.asarray(compiled(inputs[0])[0])[0]
        found = plate_ops.non_max_suppression(plate_ops.decode_head(head_out, 0.25), 0.45, 16)
        boxes.append(found.boxes[np.argsort(-found.boxes[:, 0])])
    assert len(boxes[0]) == len(boxes[1]) >= 1
    assert np.abs(boxes[0] - boxes[1]).max() < 3.0, boxes


def test_a_quantisation_that_disagrees_too_often_is_refused(
    fp32_detector: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    xml = tmp_path / "model.xml"
    shutil.copyfile(fp32_detector, xml)
    shutil.copyfile(fp32_detector.with_suffix(".bin"), xml.with_suffix(".bin"))
    height, width = _input_hw(xml)
    inputs = quantize.calibration_inputs((int(height), int(width)))[:4]
    monkeypatch.setattr(quantize, "MAX_DISAGREEING_SHARE", -0.01)  # (none may differ, ever)
    with pytest.raises(ConversionError, match="disagrees with fp32 too often"):
        quantize.quantize_detector(xml, inputs, lambda _: None)
    assert "FakeQuantize" not in _op_types(xml)  # the fp32 model is left as it was


def test_a_cpu_int8_build_quantises_only_the_detector(tmp_path: Path) -> None:
    out = tmp_path / "repo"
    args = ["build", "--target", "cpu", "--runtime", "openvino", "--precision", "int8"]
    assert main([*args, "--out", str(out), "--input-size", "320"]) == 0
    for name in TENSOR_MODELS:
        xml = out / name / "1" / "model.xml"
        assert ("FakeQuantize" in _op_types(xml)) == (name == "detector"), name
        config = load_config(out / name / "config.pbtxt")
        assert config.parameters["INFERENCE_PRECISION_HINT"].string_value == "f32"
    info = json.loads((out / "build_info.json").read_text())
    assert info["precision"] == "int8" and info["int8"] == ["detector"]
    bls = load_config(out / "plate_recognition" / "config.pbtxt")
    assert bls.parameters["build_precision"].string_value == "int8"
