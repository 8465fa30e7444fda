"""streamer.inference.embedded.server against a real tritonserver (CPU, Python backend)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from streamer.inference.embedded.environment import default_model_env
from streamer.inference.embedded.errors import TritonStartError
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.inference.embedded.tree import prepare_server_tree

_MODEL_ENV = default_model_env()
assert _MODEL_ENV is not None, "the models' environment .venv-triton is missing: run `make setup`"
MODEL_SITE_PACKAGES = (
    _MODEL_ENV / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
)

REPO_ROOT = Path(__file__).resolve().parents[4]
SHM = Path("/dev/shm")

CONFIG = """\
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] }} ]
instance_group [ {{ kind: KIND_CPU, count: 1 }} ]
{extra}
"""

# Tensors cross the stub through DLPack here; the numpy path is tested separately.
IDENTITY_TORCH = """\
from torch.utils.dlpack import from_dlpack, to_dlpack
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = from_dlpack(pb_utils.get_input_tensor_by_name(request, "INPUT0").to_dlpack())
            out = pb_utils.Tensor.from_dlpack("OUTPUT0", to_dlpack(x.clone()))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

# Fails to load unless numpy comes from the test's own environment; answers numpy's version.
NUMPY_PROBE = """\
import json
import re

import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        expected = json.loads(args["model_config"])["parameters"]["numpy_dir"]["string_value"]
        if not np.__file__.startswith(expected):
            raise RuntimeError(f"numpy from {np.__file__}, expected under {expected}")
        parts = re.match(r"(\\d+)\\.(\\d+)\\.(\\d+)", np.__version__).groups()
        self.version = np.asarray([float(p) for p in parts], dtype=np.float32)

    def execute(self, requests):
        responses = []
        for request in requests:
            batch = pb_utils.get_input_tensor_by_name(request, "INPUT0").shape()[0]
            out = torch.from_numpy(np.tile(self.version, (batch, 1)))
            tensor = pb_utils.Tensor("OUTPUT0", out.numpy())
            responses.append(pb_utils.InferenceResponse([tensor]))
        return responses
"""

IDENTITY_NUMPY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""

BROKEN = """\
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("boom in initialize")

    def execute(self, requests):
        return []
"""

CHILD = """\
import json, sys, time
from pathlib import Path
from streamer.inference.embedded.server import EmbeddedTriton

server = EmbeddedTriton(Path(sys.argv[1]), work_dir=Path(sys.argv[2]))
server.start()
print(json.dumps({"pid": server.pid, "shm": server.shm_prefix}), flush=True)
time.sleep(300)
"""


def write_model(repo: Path, name: str, code: str, extra_config: str = "") -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(CONFIG.format(extra=extra_config))
    (repo / name / "1" / "model.py").write_text(code)


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid), or None when the process is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2])


def alive(pid: int) -> bool:
    """True for a running process; a zombie awaiting its reaper counts as gone."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] != "Z"


def family(pid: int) -> set[int]:
    """The server and every process it started (children or members of its group)."""
    found = {pid}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None and pid in (stat[1], stat[2]):
                found.add(int(entry.name))
    return found


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline and alive(int(entry.name)):
                pids.append(int(entry.name))
    return pids


def shm_files(prefix: str) -> list[Path]:
    assert prefix, "the server never got a shared-memory prefix"
    return sorted(SHM.glob(f"{prefix}*"))


def readline(stream: IO[bytes], timeout_s: float) -> bytes:
    ready, _, _ = select.select([stream], [], [], timeout_s)
    assert ready, f"no line within {timeout_s} s"
    return stream.readline()


@pytest.fixture(scope="session")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One copied server tree for the whole session."""
    return prepare_server_tree(tmp_path_factory.mktemp("triton") / "tree")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, work_dir: Path) -> Iterator[EmbeddedTriton]:
    repo = tmp_path_factory.mktemp("repo")
    write_model(repo, "identity", IDENTITY_TORCH)
    numpy_dir = str(MODEL_SITE_PACKAGES / "numpy")
    param = f'parameters {{ key: "numpy_dir" value: {{ string_value: "{numpy_dir}" }} }}'
    write_model(repo, "numpy_probe", NUMPY_PROBE, param)
    write_model(repo, "identity_numpy", IDENTITY_NUMPY)
    with EmbeddedTriton(repo, work_dir=work_dir) as srv:
        yield srv
    assert not srv.running


def test_inference_over_http_and_grpc(server: EmbeddedTriton) -> None:
    assert server.running
    assert re.fullmatch(r"127\.0\.0\.1:\d+", server.grpc_url)
    assert re.fullmatch(r"127\.0\.0\.1:\d+", server.http_url)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)

    http = httpclient.InferenceServerClient(server.http_url)
    try:
        assert http.is_server_ready()
        assert http.is_model_ready("identity")
        inp = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        np.testing.assert_array_equal(http.infer("identity", [inp]).as_numpy("OUTPUT0"), x)
    finally:
        http.close()  # an open keep-alive connection delays the server's shutdown

    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        inp = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        np.testing.assert_array_equal(grpc.infer("identity", [inp]).as_numpy("OUTPUT0"), x)
    finally:
        grpc.close()

    with urllib.request.urlopen(server.metrics_url, timeout=5) as resp:
        assert b"nv_inference_request_success" in resp.read()


def test_stub_imports_numpy_and_torch_of_the_models_environment(server: EmbeddedTriton) -> None:
    """The models run in .venv-triton (numpy<2), not in this interpreter's venv (numpy 2)."""
    x = np.zeros((2, 1), dtype=np.float32)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        inp = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        version = client.infer("numpy_probe", [inp]).as_numpy("OUTPUT0")
    finally:
        client.close()
    assert version.shape == (2, 3)
    assert version[0, 0] == 1.0, f"models must get numpy 1.x, got {version[0]}"


def test_numpy_tensor_bridge(server: EmbeddedTriton) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        inp = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("identity_numpy", [inp]).as_numpy("OUTPUT0"), x)
    finally:
        client.close()


def test_async_start_outlives_its_thread_and_stop_cleans_up(
    tmp_path: Path, work_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="streamer.inference.embedded.server")
    repo = tmp_path / "repo"
    write_model(repo, "identity_numpy", IDENTITY_NUMPY)
    srv = EmbeddedTriton(repo, work_dir=work_dir)
    # asyncio.run joins the executor thread that ran start(): a parent-death signal tied to
    # that thread would kill the server here.
    asyncio.run(srv.astart())
    time.sleep(1.0)
    assert srv.running
    pid, prefix = srv.pid, srv.shm_prefix
    assert pid is not None
    with urllib.request.urlopen(f"http://{srv.http_url}/v2/health/ready", timeout=5) as resp:
        assert resp.status == 200
    members = family(pid)
    assert len(members) >= 2, "expected the server and a Python-backend stub"
    assert shm_files(prefix)

    asyncio.run(srv.astop())
    assert not srv.running
    assert srv.pid is None
    assert [p for p in members if alive(p)] == []
    assert shm_files(prefix) == []
    srv.stop()  # idempotent
    srv.stop(timeout_s=1.0)

    messages = [r.getMessage() for r in caplog.records]
    assert any("Started HTTPService at 127.0.0.1:" in m for m in messages)
    assert any("Started GRPCInferenceService at 127.0.0.1:" in m for m in messages)
    harmless = [r for r in caplog.records if "NVML" in r.getMessage()]
    assert all(r.levelno == logging.DEBUG for r in harmless)


def test_broken_model_fails_start_with_its_name(tmp_path: Path, work_dir: Path) -> None:
    # Without --model-control-mode the binary exits when a model fails to load.
    repo = tmp_path / "repo"
    write_model(repo, "identity_numpy", IDENTITY_NUMPY)
    write_model(repo, "exploding_model", BROKEN)
    srv = EmbeddedTriton(repo, work_dir=work_dir, startup_timeout_s=60)
    with pytest.raises(TritonStartError) as info:
        srv.start()
    message = str(info.value)
    assert "exploding_model" in message
    assert "boom in initialize" in message
    first = info.value.first_error  # what the start-up error line shows
    assert first is not None and "boom in initialize" in first and first in message
    assert not srv.running
    assert srv.pid is None
    assert shm_files(srv.shm_prefix) == []
    assert processes_mentioning(str(repo)) == []
    srv.stop()


def test_server_dies_with_its_parent(tmp_path: Path, work_dir: Path) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "identity_numpy", IDENTITY_NUMPY)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    with (tmp_path / "child.log").open("wb") as log:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(repo), str(work_dir)],
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
        )
    members: set[int] = set()
    try:
        assert child.stdout is not None
        info = json.loads(readline(child.stdout, timeout_s=90))
        members = family(info["pid"])
        assert len(members) >= 2
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (
            any(alive(p) for p in members) or shm_files(info["shm"])
        ):
            time.sleep(0.2)
        assert [p for p in members if alive(p)] == []
        assert shm_files(info["shm"]) == []
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()
        for pid in members:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        # The child could not remove its stub environment; the next start sweeps it, or here:
        for leftover in Path(tempfile.gettempdir()).glob(f"lpr-triton-stubenv-{child.pid}-*"):
            shutil.rmtree(leftover, ignore_errors=True)


SLOW_INIT = """\
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(60)

    def execute(self, requests):
        return []
"""


def test_stop_aborts_a_start_in_progress(tmp_path: Path, work_dir: Path) -> None:
    repo = tmp_path / "repo"
    write_model(repo, "slow_model", SLOW_INIT)
    srv = EmbeddedTriton(repo, work_dir=work_dir)
    errors: list[BaseException] = []

    def start() -> None:
        try:
            srv.start()
        except BaseException as exc:  # checked below
            errors.append(exc)

    thread = threading.Thread(target=start)
    thread.start()
    deadline = time.monotonic() + 30
    while not any("slow_model" in line for line in srv.log_tail(200)):
        assert time.monotonic() < deadline, "the server never started loading the model"
        time.sleep(0.1)
    time.sleep(1.0)  # the stub is inside initialize() now
    pid, prefix = srv.pid, srv.shm_prefix
    assert pid is not None
    members = family(pid)
    began = time.monotonic()
    srv.stop(timeout_s=3.0)
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert time.monotonic() - began < 15
    assert len(errors) == 1
    assert isinstance(errors[0], TritonStartError)
    assert "aborted" in str(errors[0])
    assert [p for p in members if alive(p)] == []
    assert shm_files(prefix) == []
