"""The models' Python: which packages the Python-backend stub imports, and how it finds them.

The models run in their own virtualenv (:func:`default_model_env`, ``.venv-triton``: numpy<2,
torch for TorchScript, OpenCV); each server's stub gets a tiny fake venv
(:func:`make_stub_env`) that points it there.

How the stub finds packages (checked empirically, Triton 2.51 / Debian 12 / pyenv 3.11 venv):

* The stub embeds the *system* ``libpython3.X.so`` with ``PyConfig_InitIsolatedConfig``:
  ``PYTHONPATH``, ``PYTHONHOME`` and the user site are ignored. Its ``sys.prefix`` comes from
  the first ``python3`` on ``PATH`` (CPython's getpath), plus a ``pyvenv.cfg`` next to it.
* Putting the venv's ``bin`` first on ``PATH`` makes the stub load the venv's site-packages,
  but also the *base interpreter's* stdlib (pyenv 3.11.7) on the system libpython (3.11.2):
  ``import ssl`` then fails (``undefined symbol: _PyModule_Add``).
* So each server gets a tiny fake venv: ``bin/python3`` plus a ``pyvenv.cfg`` whose ``home``
  is the system Python's, so the stdlib matches the stub's libpython, and a ``.pth`` file
  that adds the models' site directories (``.pth`` files, editable installs included) and
  ``PYTHONPATH``. Its ``bin`` goes first on the server's ``PATH``.

Pitfall (numpy >= 2): the stub's C++ tensor bridge was built against numpy 1.x. With numpy 2
in the stub, ``Tensor.as_numpy()`` reads zeros and ``pb_utils.Tensor(name, ndarray)`` outputs
are empty, silently. Move tensors with DLPack (``to_dlpack``/``Tensor.from_dlpack`` with torch),
which works, or put a folder holding numpy<2 first with ``stub_python_paths``. A warning is
logged at start when the stub would see numpy >= 2.
"""

from __future__ import annotations

import importlib.metadata
import os
import shlex
import shutil
import site
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from streamer.foundation.paths import PROJECT_MODEL_ENV
from streamer.inference.embedded.errors import TritonStartError
from streamer.inference.embedded.log import LOG
from streamer.inference.embedded.process import alive
from streamer.inference.embedded.tree import TRITON_VERSION

MODEL_ENV_VAR = "LPR_TRITON_PYTHON_ENV"
_STUB_ENV_PREFIX = "lpr-triton-stubenv-"


class StubEnv(NamedTuple):
    """A fake venv for one server's stub: remove ``root`` when the server is gone."""

    root: Path
    bin: Path  # goes first on the server's PATH


def default_model_env() -> Path | None:
    """The models' virtualenv: ``$LPR_TRITON_PYTHON_ENV``, else the project's ``.venv-triton``.

    ``make setup`` creates ``.venv-triton`` with numpy<2 (see the module docstring),
    torch for TorchScript and OpenCV. None when neither exists.
    """
    configured = os.environ.get(MODEL_ENV_VAR)
    if configured:
        return Path(configured)
    return PROJECT_MODEL_ENV if PROJECT_MODEL_ENV.is_dir() else None


def make_stub_env(python_env: Path | None, stub_python_paths: Sequence[Path]) -> StubEnv:
    """A new stub env in the temporary folder, named after this process.

    The stub imports ``stub_python_paths``, then ``PYTHONPATH``, then the site-packages of
    ``python_env`` (default: this interpreter's site directories). Stub envs of dead
    processes (left when an owner was SIGKILLed) are removed first.
    """
    front = [str(p) for p in stub_python_paths]
    front += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    site_dirs = _venv_site_dirs(python_env) if python_env else _stub_site_dirs()
    _sweep_stub_envs()
    root = Path(tempfile.mkdtemp(prefix=f"{_STUB_ENV_PREFIX}{os.getpid()}-"))
    try:
        bindir = _write_stub_env(root, front, site_dirs)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    _warn_about_numpy(_stub_numpy_version([*front, *site_dirs]))
    return StubEnv(root, bindir)


def _write_stub_env(root: Path, front: Sequence[str], site_dirs: Sequence[str]) -> Path:
    """Write the fake venv that makes the stub see our packages; returns its ``bin``."""
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    bindir = root / "bin"
    bindir.mkdir(parents=True)
    # getpath only needs an executable file named python3; running it runs this interpreter.
    python3 = bindir / "python3"
    python3.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python3.chmod(0o755)
    (root / "pyvenv.cfg").write_text(
        f"home = {_system_python_home(minor)}\n"
        "include-system-site-packages = false\n"
        f"version = {minor}\n"
    )
    sp = root / "lib" / f"python{minor}" / "site-packages"
    sp.mkdir(parents=True)
    (sp / "_lpr_streamer_parent_env.pth").write_text(
        f"import sys, site; sys.path[0:0] = {list(front)!r}; "
        f"list(map(site.addsitedir, {list(site_dirs)!r}))\n"
    )
    return bindir


def _system_python_home(minor: str) -> str:
    """``home`` for the stub's pyvenv.cfg: where the system libpython's stdlib lives.

    The stub links the distribution's ``libpython3.X.so`` (``/usr`` prefix on Debian/Ubuntu);
    pointing ``home`` there makes the stub use the stdlib that matches its C core.
    """
    for prefix in ("/usr", "/usr/local"):
        if Path(prefix, "lib", f"python{minor}", "os.py").is_file():
            return f"{prefix}/bin"
    return str(Path(sys._base_executable).parent)  # best effort: our own base interpreter


def _stub_site_dirs() -> list[str]:
    """Site directories of the running interpreter (their ``.pth`` files are honoured)."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if Path(d).is_dir()]


def _venv_site_dirs(env: Path) -> list[str]:
    """site-packages of a virtualenv made for this Python version."""
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site_packages = env / "lib" / minor / "site-packages"
    if not site_packages.is_dir():
        raise TritonStartError(
            f"{env} is not a {minor} virtualenv (no {site_packages}); "
            f"set {MODEL_ENV_VAR} or run `make setup`"
        )
    return [str(site_packages)]


def _sweep_stub_envs() -> None:
    """Remove stub envs of dead processes (left when an owner was SIGKILLed)."""
    for path in Path(tempfile.gettempdir()).glob(f"{_STUB_ENV_PREFIX}*-*"):
        owner = path.name[len(_STUB_ENV_PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and not alive(int(owner)):
            shutil.rmtree(path, ignore_errors=True)


def _stub_numpy_version(search: Sequence[str]) -> str | None:
    """Version of the numpy the stub will import first from ``search``, if any."""
    for dist in importlib.metadata.distributions(name="numpy", path=list(search)):
        return dist.version
    return None


def _warn_about_numpy(version: str | None) -> None:
    if version is None:
        LOG.warning("no numpy for the Python backend stub; models will fail to load")
    elif int(version.split(".")[0]) >= 2:
        LOG.warning(
            "numpy %s in the Python backend stub: Triton %s's as_numpy()/Tensor(ndarray) "
            "silently corrupt tensors under numpy>=2; use DLPack, or stub_python_paths "
            "with numpy<2",
            version,
            TRITON_VERSION,
        )
