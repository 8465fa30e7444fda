"""The server tree: the ``tritonserver`` of the ``nvidia-pytriton`` wheel, copied once.

The wheel (``nvidia-pytriton==0.7.0``, Triton 2.51) carries the server binary, the Python
backend, the shared libraries they link (``nvidia_pytriton.libs``) and one Python-backend stub
per Python version. :func:`prepare_server_tree` copies the server tree once into a cache folder
(:func:`default_work_dir`), with the stub for the running interpreter in ``backends/python``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

from streamer.inference.embedded.errors import TritonStartError
from streamer.inference.embedded.log import LOG

TRITON_VERSION = "2.51"
_TREE_MARKER = ".lpr-streamer-tree"


def default_work_dir() -> Path:
    """Cache folder for the copied server tree (one per Python minor version)."""
    cache = os.environ.get("XDG_CACHE_HOME") or ""
    base = Path(cache) if cache and Path(cache).is_absolute() else Path.home() / ".cache"
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    return base / "lpr-streamer" / f"tritonserver-{TRITON_VERSION}-py{py}"


def wheel_server_dir() -> Path:
    """The ``pytriton/tritonserver`` folder of the installed ``nvidia-pytriton`` wheel."""
    spec = importlib.util.find_spec("pytriton")  # locates without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise TritonStartError("nvidia-pytriton is not installed (pip install --no-deps ...)")
    server = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    if not (server / "bin" / "tritonserver").is_file():
        raise TritonStartError(f"no bin/tritonserver under {server}")
    return server


def wheel_libs_dir() -> Path:
    """The wheel's shared libraries, which the server needs on ``LD_LIBRARY_PATH``."""
    return wheel_server_dir().parent.parent / "nvidia_pytriton.libs"


def prepare_server_tree(work_dir: Path, source: Path | None = None) -> Path:
    """Copy the wheel's server tree plus this Python's backend stub to ``work_dir`` once.

    The copy goes to a temporary sibling that is renamed into place, so concurrent or
    interrupted runs never see half a tree; a complete tree is reused.
    """
    source = source or wheel_server_dir()
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = source / "python_backend_stubs" / py / "triton_python_backend_stub"
    if not stub.is_file():
        raise TritonStartError(f"the wheel has no Python backend stub for Python {py}: {stub}")
    try:
        wheel_version = importlib.metadata.version("nvidia-pytriton")
    except importlib.metadata.PackageNotFoundError:
        wheel_version = "unknown"
    fingerprint = (
        f"nvidia-pytriton {wheel_version}\n"
        f"stub python{py} {stub.stat().st_size}\n"
        f"tritonserver {(source / 'bin' / 'tritonserver').stat().st_size}\n"
    )
    src = str(source)
    work_dir = work_dir.expanduser().absolute()
    if _tree_matches(work_dir, fingerprint):
        return work_dir
    work_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{work_dir.name}.tmp-", dir=work_dir.parent))
    try:
        shutil.copytree(
            source,
            tmp,
            dirs_exist_ok=True,
            symlinks=True,
            ignore=lambda d, names: [
                n for n in names if n == "__pycache__" or (n == "python_backend_stubs" and d == src)
            ],
        )
        shutil.copy2(stub, tmp / "backends" / "python" / stub.name)
        (tmp / _TREE_MARKER).write_text(fingerprint)
        try:
            tmp.rename(work_dir)
            LOG.info("copied the Triton server tree to %s", work_dir)
        except OSError:
            if not work_dir.exists():
                raise
            # Another process won the race (or a foreign folder is in the way).
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not _tree_matches(work_dir, fingerprint):
        raise TritonStartError(
            f"{work_dir} exists but does not hold this wheel's server tree "
            f"(no matching {_TREE_MARKER}); delete it or pass another work_dir"
        )
    return work_dir


def _tree_matches(work_dir: Path, fingerprint: str) -> bool:
    try:
        return (work_dir / _TREE_MARKER).read_text() == fingerprint
    except OSError:
        return False
