"""Export a YOLO plate detector to TorchScript at a fixed, letterboxed input size.

Two kinds of checkpoint are accepted:
- an Ultralytics checkpoint (YOLOv8, or YOLOv5u), exported with Ultralytics'
  own exporter (``ultralytics`` is needed at conversion time only);
- a TorchScript file already exported for this input size, e.g. by YOLOv5's
  ``export.py --include torchscript`` (the seed's detector). Its first output
  is kept: YOLOv5 returns ``(predictions,)`` from an exported model.
The head layout (v5 anchors with objectness, or v8 anchor-free) is read off
the exported model's output and checked.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from converters.errors import ConversionError
from converters.model_config import DEFAULT_INPUT_HW
from converters.paths import import_plate_ops


@dataclass(frozen=True)
class ExportedDetector:
    module: torch.jit.ScriptModule
    input_hw: tuple[int, int]
    output_shape: tuple[int, int]  # per image, batch dimension removed
    layout: str  # "v5" or "v8"
    num_classes: int


class _FirstOutput(nn.Module):
    """Keep only the prediction tensor of a detector that returns a tuple."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: Tensor) -> Tensor:
        out = self.inner(x)
        if isinstance(out, (tuple, list)):
            out = out[0]
        return out


def parse_input_size(text: str) -> tuple[int, int]:
    """``"1280"`` -> (1280, 1280); ``"736x1280"`` -> (736, 1280) as height x width."""
    parts = text.lower().split("x")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ConversionError(f"input size must be N or HxW, got {text!r}") from None
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or any(v < 32 or v % 32 for v in values):
        raise ConversionError(
            f"input size must be N or HxW with multiples of 32 (>= 32), got {text!r}"
        )
    return values[0], values[1]


def is_torchscript_archive(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return any("/code/" in name for name in archive.namelist())
    except zipfile.BadZipFile:
        return False


def _export_with_ultralytics(
    checkpoint: Path, input_hw: tuple[int, int], progress: Callable[[str], None]
) -> torch.jit.ScriptModule:
    os.environ.setdefault("YOLO_OFFLINE", "1")  # never reach out to a hub
    try:
        from ultralytics import YOLO
    except ImportError as exc:
        raise ConversionError(
            "exporting an Ultralytics checkpoint needs the ultralytics package: "
            "pip install -e '.[convert]'"
        ) from exc
    with tempfile.TemporaryDirectory(prefix="detector-export-") as tmp:
        # The exporter writes next to the checkpoint: work on a copy (the
        # assets folder may be read-only).
        local = Path(tmp) / checkpoint.name
        shutil.copyfile(checkpoint, local)
        try:
            model = YOLO(str(local))
        except Exception as exc:
            raise ConversionError(
                f"detector: {checkpoint} is not an Ultralytics checkpoint: {exc}"
            ) from exc
        if model.task != "detect":
            raise ConversionError(f"detector: {checkpoint} is a {model.task!r} model, not detect")
        progress(f"detector: exporting {checkpoint.name} with Ultralytics at {input_hw}")
        exported = model.export(format="torchscript", imgsz=list(input_hw), verbose=False)
        return torch.jit.load(str(exported), map_location="cpu")


def export_detector(
    checkpoint: Path,
    input_hw: tuple[int, int] = DEFAULT_INPUT_HW,
    progress: Callable[[str], None] = print,
) -> ExportedDetector:
    if not checkpoint.is_file():
        raise ConversionError(f"detector: checkpoint {checkpoint} does not exist")
    if is_torchscript_archive(checkpoint):
        progress(f"detector: loading TorchScript {checkpoint.name}")
        try:
            module: nn.Module = torch.jit.load(str(checkpoint), map_location="cpu")
        except Exception as exc:
            raise ConversionError(f"detector: cannot load TorchScript {checkpoint}: {exc}") from exc
    else:
        module = _export_with_ultralytics(checkpoint, input_hw, progress)
    module.eval()

    dummy = torch.zeros((2, 3, *input_hw))
    try:
        with torch.inference_mode():
            raw = module(dummy)
    except Exception as exc:
        raise ConversionError(
            f"detector: the exported model does not run on a batch of 2 at {input_hw} "
            f"(a TorchScript file must be exported for this input size): {exc}"
        ) from exc
    if isinstance(raw, (tuple, list)):
        module = torch.jit.trace(_FirstOutput(module), dummy[:1], check_trace=False)
        with torch.inference_mode():
            raw = module(dummy)
    if not isinstance(raw, Tensor) or raw.ndim != 3 or raw.shape[0] != 2:
        shape = list(raw.shape) if isinstance(raw, Tensor) else type(raw).__name__
        raise ConversionError(f"detector: expected output [batch, a, b], got {shape}")

    plate_ops = import_plate_ops()
    per_image = raw[0].numpy()
    try:
        layout = plate_ops.detect_head_layout(per_image)
    except ValueError as exc:
        raise ConversionError(f"detector: {exc}") from exc
    rows, cols = per_image.shape
    num_classes = rows - 4 if layout == "v8" else cols - 5
    progress(
        f"detector: YOLO{layout} head, {num_classes} class(es), output {[rows, cols]} per image"
    )
    assert isinstance(module, torch.jit.ScriptModule)
    return ExportedDetector(module, input_hw, (rows, cols), layout, num_classes)
