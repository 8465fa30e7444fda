"""Export the networks to ONNX and to OpenVINO IR, and check the exports against PyTorch.

ONNX: ``torch.onnx.export``'s TorchScript-based exporter (``dynamo=False``: the dynamo
exporter needs ``onnxscript``), opset 20 (the first with ``AffineGrid``, which the STN needs),
a dynamic batch axis, and the tensor names the BLS calls: ``INPUT__0`` -> ``OUTPUT__0``.

OpenVINO IR: the ONNX file read by OpenVINO's ONNX frontend (``Core.read_model``: the same
conversion ``openvino.convert_model`` does, without starting OpenVINO's usage telemetry) and
saved in fp32 (``compress_to_fp16=False``); precision is chosen when the model is compiled.

Every file written is read back, compiled for the CPU and run on fresh random inputs next
to the PyTorch network it came from; a difference beyond :data:`ATOL` + :data:`RTOL` x
|reference| at any element is a :class:`ConversionError`.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from converters.errors import ConversionError
from converters.model_config import OPENVINO_HINTS

INPUT = "INPUT__0"
OUTPUT = "OUTPUT__0"
ONNX_OPSET = 20
ONNX_FILE = "model.onnx"
IR_FILE = "model.xml"  # its weights go beside it, in model.bin
#: An OpenVINO (or ONNX) output element passes when |out - ref| <= ATOL + RTOL * |ref|.
#: Measured in fp32: 7e-5 (STN, grid sampling), 2e-5 (LPRNet), 1.2e-3 on box coordinates of
#: up to 1280 px (detector). A bf16 build is checked in fp32 (the IR is fp32; bf16 is a
#: hint to the CPU plugin) and its bf16 deviation is only reported.
ATOL = 1e-3
RTOL = 1e-4


@dataclass(frozen=True)
class Comparison:
    """Worst element of ``out - ref`` on one random batch."""

    max_abs: float
    worst_ratio: float  # max of |out - ref| / (ATOL + RTOL * |ref|): <= 1 passes
    batch: int

    @property
    def ok(self) -> bool:
        return self.worst_ratio <= 1.0


class _ChannelMaxPool(nn.Module):
    """``MaxPool3d`` on a 4-D ``[N, C, H, W]`` tensor, written as ONNX can express it.

    PyTorch reads a 4-D input of ``MaxPool3d`` as one unbatched ``[C', D, H, W]`` volume, so
    LPRNet's pools run over (channels, H, W) of each sample; ONNX's MaxPool needs
    ``[N, C, D, H, W]``. Adding a channel axis of 1 computes exactly the same maxima.
    """

    def __init__(self, pool: nn.MaxPool3d) -> None:
        super().__init__()
        self.pool = pool

    def forward(self, x: Tensor) -> Tensor:
        return self.pool(x.unsqueeze(1)).squeeze(1)


def onnx_ready(module: nn.Module) -> nn.Module:
    """A copy of ``module`` that ONNX can express, computing the same function.

    TorchScript modules (the detector) are exported as they are.
    """
    if isinstance(module, torch.jit.ScriptModule):
        return module
    ready = copy.deepcopy(module).eval()
    for parent in list(ready.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, nn.MaxPool3d):
                setattr(parent, child_name, _ChannelMaxPool(child))
    return ready


def export_onnx(name: str, module: nn.Module, example: Tensor, path: Path) -> None:
    """Write ``module`` as ONNX to ``path`` (batch axis dynamic) and check the file."""
    import onnx

    ready = onnx_ready(module)
    with warnings.catch_warnings():
        # The TorchScript-based exporter is deprecated in favour of dynamo (needs onnxscript).
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(
                ready,
                (example,),
                str(path),
                input_names=[INPUT],
                output_names=[OUTPUT],
                dynamic_axes={INPUT: {0: "batch"}, OUTPUT: {0: "batch"}},
                opset_version=ONNX_OPSET,
                dynamo=False,
            )
        except Exception as exc:
            raise ConversionError(f"{name}: ONNX export failed: {_one_line(exc)}") from exc
    try:
        onnx.checker.check_model(str(path))
    except Exception as exc:
        raise ConversionError(f"{name}: the ONNX export is not valid: {_one_line(exc)}") from exc


def save_openvino(name: str, onnx_path: Path, xml_path: Path) -> None:
    """Convert the ONNX file to OpenVINO IR (fp32 weights) at ``xml_path`` (+ ``.bin``)."""
    import openvino as ov

    try:
        model = ov.Core().read_model(str(onnx_path))
    except Exception as exc:
        raise ConversionError(
            f"{name}: OpenVINO cannot convert the ONNX export: {_one_line(exc)}"
        ) from exc
    names = (set(model.input(0).get_names()), set(model.output(0).get_names()))
    if len(model.inputs) != 1 or len(model.outputs) != 1 or INPUT not in names[0]:
        raise ConversionError(f"{name}: expected one input {INPUT} and one output, got {model}")
    ov.save_model(model, str(xml_path), compress_to_fp16=False)


def compare(
    name: str,
    reference: Callable[[Tensor], Tensor],
    model_path: Path,
    input_chw: tuple[int, ...],
    batch: int,
    *,
    precision: str = "fp32",
    uniform: bool = False,
) -> Comparison:
    """Run the saved model (ONNX or IR) with OpenVINO on the CPU next to ``reference``.

    The input is fresh noise: N(0, 1) for the recognisers, U(0, 1) (an image) when
    ``uniform``. Raises ConversionError when the output shapes differ.
    """
    import openvino as ov

    seed = torch.seed() % (2**31)
    generator = torch.Generator().manual_seed(seed)
    shape = (batch, *input_chw)
    x = (
        torch.rand(shape, generator=generator)
        if uniform
        else torch.randn(shape, generator=generator)
    )
    with torch.inference_mode():
        expected = reference(x)
    if isinstance(expected, (tuple, list)):
        expected = expected[0]
    ref = expected.numpy()
    hint = OPENVINO_HINTS[precision]
    compiled = ov.Core().compile_model(str(model_path), "CPU", {"INFERENCE_PRECISION_HINT": hint})
    out = np.asarray(compiled(x.numpy())[0])
    if out.shape != ref.shape:
        raise ConversionError(
            f"{name}: OpenVINO output shape {list(out.shape)} "
            f"!= PyTorch {list(ref.shape)} for a batch of {batch}"
        )
    difference = np.abs(out.astype(np.float64) - ref)
    ratio = difference / (ATOL + RTOL * np.abs(ref))
    return Comparison(float(difference.max()), float(ratio.max()), batch)


def check(name: str, comparison: Comparison, what: str = "OpenVINO") -> None:
    """Fail the build when ``comparison`` is beyond the tolerance."""
    if not comparison.ok:
        raise ConversionError(
            f"{name}: {what} differs from PyTorch by up to {comparison.max_abs:.2e} on random "
            f"inputs (allowed {ATOL:g} + {RTOL:g} x |reference|, exceeded "
            f"{comparison.worst_ratio:.1f}-fold)"
        )


def cpu_supports_bf16() -> bool:
    """Whether OpenVINO's CPU plugin reports bf16 among this CPU's capabilities."""
    import openvino as ov

    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def _one_line(exc: BaseException) -> str:
    """The telling line of a (often multi-line) exporter or frontend error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    for line in lines:
        if "failed for" in line or "not supported" in line:
            return line[:400]
    return lines[0][:400]
