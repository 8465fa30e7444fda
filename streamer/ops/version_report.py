"""What ``python -m streamer --version`` prints: the package, the embedded Triton (as its
``tritonserver`` binary reports it) and the model repository's build. Nothing here talks to a
network.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import tempfile
from pathlib import Path

from streamer.foundation.build_info import (
    UNKNOWN,
    package_version,
    python_version,
    read_model_build,
)

#: The wheel that carries the embedded ``tritonserver`` binary.
TRITON_WHEEL = "nvidia-pytriton"
#: How long the embedded ``tritonserver`` may take to print its version and exit.
TRITON_VERSION_TIMEOUT_S = 10.0
# The row of the options table tritonserver prints at start: ``| server_version | 2.51.0 |``.
_SERVER_VERSION_ROW = re.compile(r"^\|\s*server_version\s*\|\s*(\S+)\s*\|", re.MULTILINE)


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
