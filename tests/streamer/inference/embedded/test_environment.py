"""streamer.inference.embedded.environment: the fake venv that points the stub at the models'
packages (the stub importing them is tested on a real server in test_server.py)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from streamer.inference.embedded.environment import (
    MODEL_ENV_VAR,
    default_model_env,
    make_stub_env,
)
from streamer.inference.embedded.errors import TritonStartError
from streamer.inference.embedded.log import LOGGER_NAME

MINOR = f"python{sys.version_info.major}.{sys.version_info.minor}"


def _venv(root: Path) -> Path:
    """A folder shaped like a virtualenv of this Python, without numpy."""
    (root / "lib" / MINOR / "site-packages").mkdir(parents=True)
    return root


def test_the_stub_env_points_at_the_models_site_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    monkeypatch.setenv("PYTHONPATH", "/from/pythonpath")
    env = _venv(tmp_path / "models")
    stub = make_stub_env(env, [tmp_path / "numpy1"])
    try:
        assert stub.root.name.startswith(f"lpr-triton-stubenv-{os.getpid()}-")
        assert stub.bin == stub.root / "bin" and os.access(stub.bin / "python3", os.X_OK)
        cfg = (stub.root / "pyvenv.cfg").read_text()
        assert "include-system-site-packages = false" in cfg
        (pth,) = (stub.root / "lib" / MINOR / "site-packages").glob("*.pth")
        text = pth.read_text()
        assert text.index(str(tmp_path / "numpy1")) < text.index("/from/pythonpath")
        assert str(env / "lib" / MINOR / "site-packages") in text
    finally:
        shutil.rmtree(stub.root)
    assert any("no numpy for the Python backend stub" in r.getMessage() for r in caplog.records)


def test_a_models_env_that_is_no_virtualenv_says_how_to_fix_it(tmp_path: Path) -> None:
    before = set(Path(tempfile.gettempdir()).glob(f"lpr-triton-stubenv-{os.getpid()}-*"))
    with pytest.raises(TritonStartError, match=f"is not a {MINOR} virtualenv.*{MODEL_ENV_VAR}"):
        make_stub_env(tmp_path / "nothing", [])
    assert set(Path(tempfile.gettempdir()).glob(f"lpr-triton-stubenv-{os.getpid()}-*")) == before


def test_stub_envs_of_dead_owners_are_swept(tmp_path: Path) -> None:
    owner = subprocess.Popen(["true"])  # its pid names a process that has exited
    owner.wait()
    left = Path(tempfile.mkdtemp(prefix=f"lpr-triton-stubenv-{owner.pid}-"))
    stub = make_stub_env(_venv(tmp_path / "models"), [])
    try:
        assert not left.exists()
    finally:
        shutil.rmtree(stub.root)
        shutil.rmtree(left, ignore_errors=True)


def test_the_models_env_comes_from_the_environment_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MODEL_ENV_VAR, str(tmp_path))
    assert default_model_env() == tmp_path
    monkeypatch.delenv(MODEL_ENV_VAR)
    assert default_model_env() != tmp_path
