"""Render config.pbtxt templates and parse them with Triton's own protobuf classes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from string import Template

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from converters.errors import ConversionError
from converters.paths import TEMPLATES


@dataclass(frozen=True)
class TensorModel:
    """A TorchScript model of the repository and how Triton should batch it."""

    name: str
    input_dims: tuple[int, ...]
    output_dims: tuple[int, ...]
    cpu_max_batch_size: int
    cpu_torch_threads: int
    gpu_max_batch_size: int
    gpu_preferred_batch_sizes: tuple[int, ...]
    cpu_instances: int = 1


def _dims(dims: tuple[int, ...]) -> str:
    return ", ".join(str(d) for d in dims)


def render_tensor_model(model: TensorModel, target: str, gpu_instances: int = 1) -> str:
    if target == "cpu":
        template = TEMPLATES / "torchscript_python.pbtxt"
        values = {
            "max_batch_size": model.cpu_max_batch_size,
            "max_queue_delay_us": 1000,
            "torch_threads": model.cpu_torch_threads,
            "cpu_instances": model.cpu_instances,
        }
    elif target == "gpu":
        template = TEMPLATES / "torchscript_libtorch.pbtxt"
        values = {
            "max_batch_size": model.gpu_max_batch_size,
            "preferred_batch_sizes": _dims(model.gpu_preferred_batch_sizes),
            "max_queue_delay_us": 2000,
            "gpu_instances": gpu_instances,
        }
    else:
        raise ConversionError(f"unknown target {target!r}: use cpu or gpu")
    return Template(template.read_text()).substitute(
        name=model.name,
        input_dims=_dims(model.input_dims),
        output_dims=_dims(model.output_dims),
        **values,
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
