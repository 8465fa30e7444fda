"""What this service is built from: one place for the versions that ``--version`` prints and
``lpr_build_info`` exports.

* the package (``streamer.__version__``);
* the model repository a Triton serves: ``build_info.json``, written by ``python -m converters
  build`` beside the models (built when, for which target and runtime, the detector's input);
* the Triton server (its version as its server metadata gives it, or as the embedded
  ``tritonserver`` binary reports it: :func:`embedded_triton_version`).

:func:`version_report` is what ``python -m streamer --version`` prints. Nothing here talks to
a network: a caller that has a Triton at hand passes what it answered.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import re
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamer import __version__

#: The file ``python -m converters build`` writes in the repository it built.
BUILD_INFO_FILE = "build_info.json"
#: What a field reads as when its source is not at hand (no repository built, no Triton yet).
UNKNOWN = "unknown"
#: The wheel that carries the embedded ``tritonserver`` binary.
TRITON_WHEEL = "nvidia-pytriton"
#: How long the embedded ``tritonserver`` may take to print its version and exit.
TRITON_VERSION_TIMEOUT_S = 10.0
# The row of the options table tritonserver prints at start: ``| server_version | 2.51.0 |``.
_SERVER_VERSION_ROW = re.compile(r"^\|\s*server_version\s*\|\s*(\S+)\s*\|", re.MULTILINE)


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


def embedded_triton_version(timeout_s: float = TRITON_VERSION_TIMEOUT_S) -> str | None:
    """The version of the embedded ``tritonserver`` (of the ``nvidia-pytriton`` wheel) as the
    binary reports it (``2.51.0``); None when the wheel is not installed or it says nothing.

    The binary has no ``--version``. At start it prints its options table, ``server_version``
    among them, before it looks at its model repository; given one that does not exist and no
    HTTP, gRPC or metrics endpoint, it exits there: no port opened, no model loaded (0.04 s
    here). The package is imported here only (streamer/inference/embedded/__init__.py).
    """
    from streamer.inference.embedded.errors import TritonStartError
    from streamer.inference.embedded.tree import wheel_server_dir

    try:
        binary = wheel_server_dir() / "bin" / "tritonserver"
    except TritonStartError:
        return None
    with tempfile.TemporaryDirectory(prefix="lpr-triton-version-") as scratch:
        command = [
            str(binary),
            f"--model-repository={Path(scratch) / 'none'}",  # absent: it exits at once
            "--allow-http=false",
            "--allow-grpc=false",
            "--allow-metrics=false",
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
    match = _SERVER_VERSION_ROW.search(done.stdout + done.stderr)
    return match.group(1) if match else None


def triton_wheel_version() -> str | None:
    """The installed ``nvidia-pytriton`` wheel's version; None when it is not installed."""
    try:
        return importlib.metadata.version(TRITON_WHEEL)
    except importlib.metadata.PackageNotFoundError:
        return None


def version_report(repository: Path) -> str:
    """What ``python -m streamer --version`` prints: the package, the embedded Triton and the
    model repository at ``repository``, a line each::

        lpr-streamer 0.1.0 (Python 3.11.2)
        Triton 2.51.0 (embedded: the tritonserver of nvidia-pytriton 0.7.0)
        model repository /srv/lpr/model_repository: cpu openvino fp32, detector 736x1280, built …
    """
    wheel = triton_wheel_version()
    if wheel is None:
        triton = f"Triton {UNKNOWN} (embedded: {TRITON_WHEEL} is not installed)"
    else:
        triton = (
            f"Triton {embedded_triton_version() or UNKNOWN} "
            f"(embedded: the tritonserver of {TRITON_WHEEL} {wheel})"
        )
    build = read_model_build(repository)
    return "\n".join(
        [
            f"lpr-streamer {package_version()} (Python {python_version()})",
            triton,
            f"model repository {repository}: {build.describe() if build else 'not built'}",
        ]
    )
