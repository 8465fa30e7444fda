"""The OpenVINO CPU repository reads what the TorchScript one reads, through the whole BLS."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from converters import assets
from converters.onnx_export import cpu_supports_bf16
from streamer.domain.frames import Frame, PlateReading
from streamer.inference.client import PlateRecognizer
from streamer.inference.embedded.errors import TritonStartError
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.tracking.tracker import iou_matrix

MIN_IOU = 0.99

Plate = tuple[np.ndarray, float, str]


def _media(name: str) -> Path:
    return assets.verify(assets.asset(name), assets.default_assets_dir())


def _car_1920x1080() -> np.ndarray:
    image = cv2.imread(str(_media("car.jpg")))
    return cv2.resize(image, (1920, 1080), interpolation=cv2.INTER_AREA)


def _yard_frames(count: int = 120, step: int = 4) -> list[np.ndarray]:
    with av.open(str(_media("yard_cam.ts"))) as container:
        frames = [
            frame.to_ndarray(format="bgr24")
            for index, frame in zip(range(count), container.decode(video=0), strict=False)
            if index % step == 0
        ]
    assert len(frames) == count // step
    return frames


def _read(server: EmbeddedTriton, frames: list[np.ndarray]) -> list[list[Plate]]:
    """Every frame through ``plate_recognition`` with the service's own stream client."""

    async def read() -> list[tuple[PlateReading, ...]]:
        recognizer = PlateRecognizer(server.grpc_url, request_timeout_s=240)
        await recognizer.start()
        try:
            await recognizer.wait_ready(60)
            return await asyncio.gather(
                *(
                    recognizer.recognise(Frame("test", i, i / 15, 0.0, 0.0, frame))
                    for i, frame in enumerate(frames)
                )
            )
        finally:
            await recognizer.close()

    return [
        [(np.array(p.box), p.det_score, p.text) for p in plates] for plates in asyncio.run(read())
    ]


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two boxes (x1, y1, x2, y2), by the tracker's own measure."""
    return float(iou_matrix(np.reshape(a, (1, 4)), np.reshape(b, (1, 4)))[0, 0])


def _assert_same_plates(reference: list[Plate], other: list[Plate], where: str) -> None:
    """Same plates (matched by box), same texts, boxes at IoU >= MIN_IOU, scores close."""
    assert len(other) == len(reference), (where, reference, other)
    for box, score, text in reference:
        best = max(other, key=lambda p: _iou(box, p[0]))
        assert _iou(box, best[0]) >= MIN_IOU, (where, box, best[0])
        assert best[2] == text, (where, text, best[2])
        assert abs(best[1] - score) < 0.01, (where, score, best[1])


@pytest.fixture(scope="module")
def yard_frames() -> list[np.ndarray]:
    return _yard_frames()


def test_openvino_reads_the_van_plate_like_torchscript(
    torchscript_server: EmbeddedTriton, openvino_server: EmbeddedTriton
) -> None:
    car = _car_1920x1080()
    (reference,) = _read(torchscript_server, [car])
    (plates,) = _read(openvino_server, [car])
    # The detector's box at the default crop padding reads the plate right on both runtimes.
    assert "B840CK197" in [p[2] for p in reference]
    assert "B840CK197" in [p[2] for p in plates]
    _assert_same_plates(reference, plates, "car.jpg")


def test_openvino_reads_the_yard_clip_like_torchscript(
    torchscript_server: EmbeddedTriton,
    openvino_server: EmbeddedTriton,
    yard_frames: list[np.ndarray],
) -> None:
    reference = _read(torchscript_server, yard_frames)
    plates = _read(openvino_server, yard_frames)
    assert sum(len(p) for p in reference) >= len(yard_frames)  # the clip has plates to read
    for index, (expected, actual) in enumerate(zip(reference, plates, strict=True)):
        _assert_same_plates(expected, actual, f"yard_cam.ts frame {4 * index}")


def _copy_with_parameter(
    source: Path,
    target: Path,
    key: str,
    old: str,
    new: str,
    models: tuple[str, ...] = ("detector", "stn", "lprnet"),
) -> Path:
    """A copy of a built repository with one parameter of some tensor models changed."""
    shutil.copytree(source, target)
    for name in models:
        config = target / name / "config.pbtxt"
        before = f'key: "{key}", value: {{ string_value: "{old}" }}'
        assert before in config.read_text()
        config.write_text(config.read_text().replace(before, before.replace(old, new)))
    return target


def test_openvino_model_with_a_bad_parameter_fails_at_load_naming_it(
    openvino_repository: Path, tmp_path: Path
) -> None:
    repo = _copy_with_parameter(
        openvino_repository, tmp_path / "repo", "INFERENCE_NUM_THREADS", "1", "one"
    )
    server = EmbeddedTriton(repo, startup_timeout_s=120)
    with pytest.raises(TritonStartError) as failure:
        server.start()
    assert "stn: parameter INFERENCE_NUM_THREADS must be an integer >= 1, got 'one'" in str(
        failure.value
    )
    assert not server.running


@pytest.mark.skipif(not cpu_supports_bf16(), reason="OpenVINO reports no bf16 on this CPU")
def test_openvino_bf16_hint_loads_and_reads_the_van_plate(
    openvino_repository: Path, tmp_path: Path
) -> None:
    # As `--precision bf16` builds it: the detector in bf16, the recognisers in f32.
    repo = _copy_with_parameter(
        openvino_repository,
        tmp_path / "repo",
        "INFERENCE_PRECISION_HINT",
        "f32",
        "bf16",
        ("detector",),
    )
    with EmbeddedTriton(repo) as server:
        (plates,) = _read(server, [_car_1920x1080()])
    seed_box = np.array([232.4, 814.2, 324.6, 841.9])
    near = [p for p in plates if np.abs(p[0] - seed_box).max() <= 10]
    assert len(near) == 1, plates
    assert near[0][2] in ("B840OK197", "B840CK197"), near
