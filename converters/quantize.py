"""INT8 for the detector on the CPU: post-training quantisation with NNCF (``--precision int8``).

NNCF (OpenVINO's own compression library) calibrates the fp32 IR on real frames, letterboxed
exactly as the BLS feeds the detector (``plate_ops.letterbox``), and writes an IR whose
convolutions run in INT8 (VNNI/AMX where the CPU has them). The head's decoding (the DFL and
the box arithmetic after the last convolutions) stays in fp32: quantised, it moved boxes by
about 4 px in the 1280x736 input; kept in fp32, by 0.5 px (median), at the same speed.
STN and LPRNet stay fp32: together they are under 3 % of the CPU per frame, and the texts
depend on their every output.

Calibration frames: every 4th frame of the shared yard clip and the van picture (``car.jpg``
at 1920x1080), 31 in all. They come from the footage the accuracy report measures, so the
report alone cannot tell whether INT8 holds on other footage; the build also says how far the
quantised detector is from the fp32 one on those frames (:class:`Agreement`), and refuses a
build whose detector finds a different number of plates on more than
``MAX_DISAGREEING_SHARE`` of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from converters import assets
from converters.errors import ConversionError
from converters.paths import import_plate_ops

#: Every how many frames of the yard clip a calibration frame is taken.
CALIBRATION_STEP = 4
#: The van picture is scaled to the clip's frame size before its letterbox.
CAR_SIZE = (1920, 1080)
#: The head's ops left in fp32 (NNCF ignored scope, by OpenVINO op name): the DFL and the
#: decoding ops of the YOLOv8 head (module 22), not its convolutions.
HEAD_PATTERNS = (r"/22/dfl/.*", r"/22/[A-Za-z][A-Za-z_0-9]*$")
#: A build fails when more of the calibration frames than this give another plate count.
MAX_DISAGREEING_SHARE = 0.15
#: The thresholds of the count comparison (the BLS's defaults).
CONF_THRESHOLD, IOU_THRESHOLD = 0.25, 0.45


@dataclass(frozen=True)
class Agreement:
    """The quantised detector against the fp32 one, on the calibration frames."""

    frames: int
    same_count: int  # frames where both find as many plates
    median_shift_px: float  # of the boxes of those frames, in the detector's input pixels
    max_shift_px: float

    def describe(self) -> str:
        return (
            f"the same plate count on {self.same_count} of {self.frames} calibration frames, "
            f"boxes within {self.median_shift_px:.1f} px (median), {self.max_shift_px:.1f} px "
            "(worst) of fp32's"
        )


def calibration_inputs(
    input_hw: tuple[int, int], assets_dir: Path | None = None
) -> list[np.ndarray]:
    """The calibration batches (1x3xHxW float32), letterboxed as the BLS does."""
    import av
    import cv2

    root = assets_dir or assets.default_assets_dir()
    try:
        clip = assets.verify(assets.YARD_CAM, root)
        car = assets.verify(assets.CAR, root)
    except assets.AssetError as exc:
        raise ConversionError(f"--precision int8 needs the calibration footage: {exc}") from exc
    plate_ops = import_plate_ops()
    images: list[np.ndarray] = []
    with av.open(str(clip)) as container:
        for index, frame in enumerate(container.decode(video=0)):
            if index % CALIBRATION_STEP == 0:
                images.append(frame.to_ndarray(format="bgr24"))
    picture = cv2.imread(str(car))
    if picture is None:
        raise ConversionError(f"cannot read {car}")
    images.append(cv2.resize(picture, CAR_SIZE, interpolation=cv2.INTER_LINEAR))
    return [plate_ops.letterbox(image, input_hw)[0][None] for image in images]


def quantize_detector(
    xml_path: Path, inputs: list[np.ndarray], progress: Callable[[str], None]
) -> Agreement:
    """Quantise the detector IR at ``xml_path`` in place (INT8 convolutions, the head's
    decoding in fp32); raises :class:`ConversionError` when it disagrees too often."""
    import nncf
    import openvino as ov

    core = ov.Core()
    fp32 = core.read_model(str(xml_path))
    progress(f"detector: calibrating INT8 on {len(inputs)} frames (NNCF)")
    quantized = nncf.quantize(
        fp32,
        nncf.Dataset(inputs),
        preset=nncf.QuantizationPreset.MIXED,
        subset_size=len(inputs),
        ignored_scope=nncf.IgnoredScope(patterns=list(HEAD_PATTERNS), validate=False),
    )
    agreement = _agreement(core, fp32, quantized, inputs)
    progress(f"detector: INT8 finds {agreement.describe()}")
    if agreement.same_count < (1 - MAX_DISAGREEING_SHARE) * agreement.frames:
        raise ConversionError(
            f"detector: INT8 quantisation disagrees with fp32 too often ({agreement.describe()}; "
            f"at most {MAX_DISAGREEING_SHARE:.0%} of the frames may differ)"
        )
    # Saved beside, then moved over: the fp32 weights are memory-mapped while it writes.
    staged = xml_path.with_name(f"int8-{xml_path.name}")
    ov.save_model(quantized, str(staged), compress_to_fp16=False)
    staged.with_suffix(".bin").replace(xml_path.with_suffix(".bin"))
    staged.replace(xml_path)
    return agreement


def _agreement(core: Any, fp32: Any, quantized: Any, inputs: list[np.ndarray]) -> Agreement:
    """Both detectors on ``inputs``: OpenVINO objects, typed loosely (imported lazily)."""
    plate_ops = import_plate_ops()
    config = {"INFERENCE_NUM_THREADS": "1", "INFERENCE_PRECISION_HINT": "f32"}
    models = [core.compile_model(m, "CPU", config) for m in (fp32, quantized)]

    def detections(model: Any, x: np.ndarray) -> Any:
        head = np.asarray(model(x)[0])[0]
        found = plate_ops.decode_head(head, CONF_THRESHOLD, "auto")
        return plate_ops.non_max_suppression(found, IOU_THRESHOLD, 16)

    same, shifts = 0, []
    for x in inputs:
        reference, candidate = (detections(m, x) for m in models)
        if len(reference) != len(candidate):
            continue
        same += 1
        for box in reference.boxes:
            shifts.append(float(np.abs(candidate.boxes - box).max(axis=1).min()))
    return Agreement(
        len(inputs),
        same,
        float(np.median(shifts)) if shifts else 0.0,
        float(np.max(shifts)) if shifts else 0.0,
    )
