"""Detector export: real YOLOv8n checkpoint and YOLOv5-style TorchScript files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from converters import assets
from converters.detector import export_detector, parse_input_size
from converters.errors import ConversionError


class _FakeV5(nn.Module):
    """Output like YOLOv5's exported model: a tuple whose first item is [B, anchors, 5 + nc]."""

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        b = x.shape[0]
        pooled = x.mean(dim=(1, 2, 3)).view(b, 1, 1)
        return pooled.expand(b, 252, 6).contiguous(), pooled


class _FakeV8(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        b = x.shape[0]
        return x.mean(dim=(1, 2, 3)).view(b, 1, 1).expand(b, 6, 168).contiguous()


@pytest.mark.parametrize(
    ("text", "hw"), [("1280", (1280, 1280)), ("736x1280", (736, 1280)), ("640X640", (640, 640))]
)
def test_parse_input_size(text: str, hw: tuple[int, int]) -> None:
    assert parse_input_size(text) == hw


@pytest.mark.parametrize("text", ["1000", "abc", "0", "64x64x64", "-32"])
def test_parse_input_size_rejects(text: str) -> None:
    with pytest.raises(ConversionError, match="input size"):
        parse_input_size(text)


def test_real_yolov8_checkpoint_exports_with_v8_head() -> None:
    checkpoint = assets.verify(assets.DETECTOR, assets.default_assets_dir())
    exported = export_detector(checkpoint, (640, 640), progress=lambda _: None)
    assert exported.layout == "v8"
    assert exported.num_classes == 1
    # 640/8, /16, /32 grids: 6400 + 1600 + 400 anchors.
    assert exported.output_shape == (5, 8400)
    with torch.inference_mode():
        assert tuple(exported.module(torch.zeros(3, 3, 640, 640)).shape) == (3, 5, 8400)


def test_yolov5_style_torchscript_keeps_first_output(tmp_path: Path) -> None:
    path = tmp_path / "yolov5.torchscript"
    torch.jit.save(torch.jit.trace(_FakeV5(), torch.zeros(1, 3, 64, 96)), str(path))
    exported = export_detector(path, (64, 96), progress=lambda _: None)
    assert exported.layout == "v5"
    assert exported.num_classes == 1
    assert exported.output_shape == (252, 6)
    with torch.inference_mode():
        out = exported.module(torch.ones(2, 3, 64, 96))
    assert isinstance(out, Tensor) and tuple(out.shape) == (2, 252, 6)


def test_v8_style_torchscript(tmp_path: Path) -> None:
    path = tmp_path / "v8.torchscript"
    torch.jit.save(torch.jit.trace(_FakeV8(), torch.zeros(1, 3, 64, 64)), str(path))
    exported = export_detector(path, (64, 64), progress=lambda _: None)
    assert (exported.layout, exported.num_classes, exported.output_shape) == ("v8", 2, (6, 168))


def test_not_a_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "detector.pt"
    path.write_bytes(b"\x00garbage" * 100)
    with pytest.raises(ConversionError, match="not an Ultralytics checkpoint"):
        export_detector(path, (640, 640), progress=lambda _: None)
    with pytest.raises(ConversionError, match="does not exist"):
        export_detector(tmp_path / "missing.pt", (640, 640), progress=lambda _: None)
