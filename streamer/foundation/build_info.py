"""What this service is built from: one place for the versions that ``--version`` prints and
``lpr_build_info`` exports.

* the package (``streamer.__version__``);
* the model repository a Triton serves: ``build_info.json``, written by ``python -m converters
  build`` beside the models (built when, for which target and runtime, the detector's input).

The Triton server's version comes from its server metadata, or for the embedded one from its
binary (streamer/ops/version_report.py, which also writes what ``--version`` prints).
"""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamer import __version__

#: The file ``python -m converters build`` writes in the repository it built.
BUILD_INFO_FILE = "build_info.json"
#: What a field reads as when its source is not at hand (no repository built, no Triton yet).
UNKNOWN = "unknown"


@dataclass(frozen=True)
class ModelBuild:
    """A model repository's ``build_info.json``, in the few fields a user compares."""

    built_at: str = UNKNOWN
    target: str = UNKNOWN
    runtime: str = UNKNOWN
    precision: str = UNKNOWN
    #: The detector's input, ``HxW`` (``736x1280``).
    detector_input: str = UNKNOWN

    @classmethod
    def from_dict(cls, info: dict[str, Any]) -> ModelBuild:
        """From the parsed JSON (keys that are missing read as :data:`UNKNOWN`)."""
        hw = info.get("input_hw")
        detector_input = (
            f"{int(hw[0])}x{int(hw[1])}" if isinstance(hw, list | tuple) and len(hw) == 2 else None
        )
        return cls(
            built_at=str(info.get("built_at") or UNKNOWN),
            target=str(info.get("target") or UNKNOWN),
            # Repositories built before the runtime was recorded were TorchScript.
            runtime=str(info.get("runtime") or "torchscript"),
            precision=str(info.get("precision") or "fp32"),
            detector_input=detector_input or UNKNOWN,
        )

    def describe(self) -> str:
        """One line: ``cpu openvino fp32, detector 736x1280, built 2026-12-01T10:00:00Z``."""
        if self.built_at == UNKNOWN:
            return "not built"
        return (
            f"{self.target} {self.runtime} {self.precision}, detector {self.detector_input}, "
            f"built {self.built_at}"
        )


def model_build_from_config(config: Mapping[str, Any]) -> ModelBuild:
    """What a served ``plate_recognition``'s model config says of its build (the JSON of
    Triton's ``get_model_config``): the converters write the detector's input there
    (``detector_input_height``, ``detector_input_width``) and the build (``build_target``,
    ``build_runtime``, ``build_precision``, ``built_at``); a repository built before those
    were written reads :data:`UNKNOWN` for them."""
    inner = config.get("config", config)
    parameters = inner.get("parameters") if isinstance(inner, Mapping) else None
    values = {
        key: str(value.get("string_value", "")) if isinstance(value, Mapping) else ""
        for key, value in (parameters.items() if isinstance(parameters, Mapping) else ())
    }
    height, width = values.get("detector_input_height"), values.get("detector_input_width")
    detector_input = (
        f"{int(height)}x{int(width)}"
        if height and width and height.isdigit() and width.isdigit()
        else UNKNOWN
    )
    return ModelBuild(
        built_at=values.get("built_at") or UNKNOWN,
        target=values.get("build_target") or UNKNOWN,
        runtime=values.get("build_runtime") or UNKNOWN,
        precision=values.get("build_precision") or UNKNOWN,
        detector_input=detector_input,
    )


def read_model_build(repository: Path) -> ModelBuild | None:
    """The build of the repository at ``repository``; None when it has no readable
    ``build_info.json`` (not built, or built by hand)."""
    try:
        info = json.loads((repository / BUILD_INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return ModelBuild.from_dict(info) if isinstance(info, dict) else None


def package_version() -> str:
    """The installed package's version (``0+unknown`` from a tree that is not installed)."""
    return __version__


def python_version() -> str:
    return platform.python_version()
