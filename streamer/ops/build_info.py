"""What this service is built from: one place for the versions that ``--version`` prints and
``lpr_build_info`` exports.

* the package (``streamer.__version__``);
* the model repository a Triton serves: ``build_info.json``, written by ``python -m converters
  build`` beside the models (built when, for which target and runtime, the detector's input);
* the Triton server (its version as its server metadata gives it, or as the embedded
  ``tritonserver`` binary reports it).

Nothing here talks to a network: a caller that has a Triton at hand passes what it answered.
"""

from __future__ import annotations

import json
import platform
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
