"""Render config.pbtxt templates and parse them with Triton's own protobuf classes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from string import Template

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from converters.errors import ConversionError
from converters.paths import TEMPLATES

#: The detector's input (height, width) when none is asked for: the footage and most cameras
#: are 16:9, which a 736x1280 letterbox holds with little padding, for 42 % less work than a
#: square 1280x1280 one (`make models` and the README's commands use this default).
DEFAULT_INPUT_HW = (736, 1280)
#: The region detector's square input (0: none). A region is cut at the whole-frame
#: letterbox's scale, so 480 sees 720x720 pixels of a 1080p frame, for a quarter of a
#: 736x1280 pass (40 % of the detector's time on the yard footage, which moves in one corner:
#: docs/PERFORMANCE.md). Model_repository/plate_recognition/1/regions.py plans the regions.
DEFAULT_REGION_SIZE = 480


@dataclass(frozen=True)
class TensorModel:
    """A tensor model of the repository (detector, stn, lprnet) and how Triton should batch it."""

    name: str
    input_dims: tuple[int, ...]
    output_dims: tuple[int, ...]
    cpu_max_batch_size: int
    cpu_torch_threads: int
    gpu_max_batch_size: int
    gpu_preferred_batch_sizes: tuple[int, ...]
    cpu_instances: int = 1
    # Whether ``--precision bf16`` applies to it on the CPU (OpenVINO); the others stay f32.
    cpu_bf16: bool = False
    # Whether ``--precision int8`` quantises it (converters/quantize.py); the others stay f32.
    cpu_int8: bool = False


def _dims(dims: tuple[int, ...]) -> str:
    return ", ".join(str(d) for d in dims)


#: (target, runtime) -> the tensor models' config template.
TEMPLATE_FILES = {
    ("cpu", "torchscript"): "torchscript_python.pbtxt",
    ("cpu", "openvino"): "openvino_python.pbtxt",
    ("gpu", "torchscript"): "torchscript_libtorch.pbtxt",
    ("gpu", "onnx"): "onnxruntime_onnx.pbtxt",
}
#: Where ONNX Runtime's TensorRT provider keeps the engines it builds (inside the server).
TRT_CACHE_DIR = "/tmp/lpr-streamer-trt-cache"


#: OpenVINO precision hints, by the names of the converter's ``--precision``. An int8 build's
#: IR holds its quantisation; the ops left in floating point run in f32.
OPENVINO_HINTS = {"fp32": "f32", "bf16": "bf16", "int8": "f32"}
RUNTIMES = ("torchscript", "openvino", "onnx")
#: The runtime a target gets when none is asked for: on the CPU, OpenVINO reads the same texts
#: as TorchScript with 1.18x less CPU per frame (bench.runtimes, docs/PERFORMANCE.md, R).
DEFAULT_RUNTIMES = {"cpu": "openvino", "gpu": "torchscript"}
PRECISIONS = ("fp32", "bf16", "int8", "fp16")
#: ``--precision auto``: bf16 for the detector where this CPU runs bf16 natively (OpenVINO
#: reports it), else fp32; the runtime's default on other runtimes. `make models` uses it:
#: on the footage variants bf16 gave the same event texts as fp32 (`make accuracy`).
AUTO_PRECISION = "auto"


@dataclass(frozen=True)
class Serving:
    """How the tensor models are served: runtime, precision, GPU accelerator."""

    runtime: str = "torchscript"
    precision: str = "fp32"
    tensorrt: bool = False

    @classmethod
    def resolve(
        cls, target: str, runtime: str | None, precision: str | None, tensorrt: bool = False
    ) -> Serving:
        """Check the combination for ``target``; ``precision`` None is the runtime's default.

        cpu: torchscript (fp32) or openvino (fp32, bf16, int8); gpu: torchscript (fp32) or onnx
        (fp32; with the TensorRT accelerator fp16, the default, or fp32).
        """
        runtime = runtime or DEFAULT_RUNTIMES.get(target, "torchscript")
        if (target, runtime) not in TEMPLATE_FILES:
            runtimes = [r for t, r in TEMPLATE_FILES if t == target]
            if not runtimes:
                raise ConversionError(f"unknown target {target!r}: use cpu or gpu")
            raise ConversionError(
                f"runtime {runtime!r} is not available for target {target}: use one of {runtimes}"
            )
        if tensorrt and runtime != "onnx":
            raise ConversionError("the TensorRT accelerator needs --target gpu --runtime onnx")
        allowed = {
            "torchscript": ("fp32",),
            "openvino": tuple(OPENVINO_HINTS),
            "onnx": ("fp16", "fp32") if tensorrt else ("fp32",),
        }[runtime]
        chosen = precision or allowed[0]
        if chosen not in allowed:
            what = f"{runtime} with TensorRT" if tensorrt else runtime
            hint = " (fp16 needs the TensorRT accelerator)" if chosen == "fp16" else ""
            raise ConversionError(
                f"precision {chosen!r} is not available for {what}: use one of "
                f"{list(allowed)}{hint}"
            )
        return cls(runtime, chosen, tensorrt)


def render_tensor_model(
    model: TensorModel, target: str, gpu_instances: int = 1, serving: Serving | None = None
) -> str:
    serving = serving or Serving()
    Serving.resolve(target, serving.runtime, serving.precision, serving.tensorrt)  # or raise
    template_file = TEMPLATE_FILES[(target, serving.runtime)]
    values: dict[str, object]
    if target == "cpu":
        values = {
            "max_batch_size": model.cpu_max_batch_size,
            "max_queue_delay_us": 1000,
            "torch_threads": model.cpu_torch_threads,
            "threads": model.cpu_torch_threads,
            "precision_hint": cpu_precision_hint(model, serving),
            "cpu_instances": model.cpu_instances,
        }
    else:
        values = {
            "max_batch_size": model.gpu_max_batch_size,
            "preferred_batch_sizes": _dims(model.gpu_preferred_batch_sizes),
            "max_queue_delay_us": 2000,
            "gpu_instances": gpu_instances,
            "accelerator_note": " (TensorRT accelerator)" if serving.tensorrt else "",
            "optimization": _tensorrt_block(model, serving.precision) if serving.tensorrt else "",
        }
    return Template((TEMPLATES / template_file).read_text()).substitute(
        name=model.name,
        input_dims=_dims(model.input_dims),
        output_dims=_dims(model.output_dims),
        **values,
    )


def cpu_precision_hint(model: TensorModel, serving: Serving) -> str:
    """OpenVINO's precision hint for ``model``: bf16 only where the model allows it."""
    if serving.precision == "bf16" and not model.cpu_bf16:
        return OPENVINO_HINTS["fp32"]
    return OPENVINO_HINTS.get(serving.precision, serving.precision)


def _tensorrt_block(model: TensorModel, precision: str) -> str:
    def shape(batch: int) -> str:
        return "x".join(str(d) for d in (batch, *model.input_dims))

    return Template((TEMPLATES / "tensorrt_accelerator.pbtxt").read_text()).substitute(
        precision_mode=precision.upper(),
        cache_dir=TRT_CACHE_DIR,
        min_shape=shape(1),
        opt_shape=shape(max(model.gpu_preferred_batch_sizes)),
        max_shape=shape(model.gpu_max_batch_size),
    )


def render_plate_recognition(**values: object) -> str:
    template = TEMPLATES / "plate_recognition.pbtxt"
    return Template(template.read_text()).substitute(**values)


def parse_config(text: str, origin: str = "config.pbtxt") -> model_config_pb2.ModelConfig:
    """Parse a config.pbtxt the way Triton does; a ConversionError names the origin."""
    config = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise ConversionError(f"{origin}: not a valid Triton model config: {exc}") from exc
    return config


def load_config(path: Path) -> model_config_pb2.ModelConfig:
    return parse_config(path.read_text(), str(path))
