"""docker/triton_liveness.py, the Triton image's liveness probe, run as the probe runs it
(a subprocess) against a real tritonserver whose Python-backend stub is then killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

from converters.paths import MODEL_REPOSITORY, PROJECT_ROOT
from streamer.inference.embedded.process import python_stubs
from streamer.inference.embedded.server import EmbeddedTriton

PROBE = PROJECT_ROOT / "docker" / "triton_liveness.py"


def _probe(*args: str) -> subprocess.CompletedProcess[str]:
    # -I: the probe needs nothing but the standard library (the Triton image's python3).
    return subprocess.run(
        [sys.executable, "-I", str(PROBE), *args], capture_output=True, text=True, timeout=30
    )


def test_a_live_server_passes_and_one_with_a_dead_stub_fails() -> None:
    with EmbeddedTriton(MODEL_REPOSITORY) as server:
        assert server.pid is not None
        url, pid = f"http://{server.http_url}", str(server.pid)
        healthy = _probe("--url", url, "--pid", pid)
        assert (healthy.returncode, healthy.stdout) == (0, "")

        stub = next(p for p, name in python_stubs(server.pid).items() if name == "lprnet_0_0")
        os.kill(stub, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (done := _probe("--url", url, "--pid", pid)).returncode == 0:
            assert time.monotonic() < deadline, "the dead stub was never seen"
            time.sleep(0.2)
        assert done.returncode == 1
        assert done.stdout.startswith(f"not live: a Python-backend stub died (pid {stub} ")
        assert done.stdout.count("\n") == 1
        # What the probe is there for: Triton itself still says it is live and ready.
        for path in ("live", "ready"):
            with urllib.request.urlopen(f"{url}/v2/health/{path}", timeout=10) as answer:
                assert answer.status == 200, path


def test_a_server_that_does_not_answer_fails_naming_the_url() -> None:
    done = _probe("--url", "http://127.0.0.1:9", "--pid", str(os.getpid()), "--timeout", "1")
    assert done.returncode == 1
    assert done.stdout.startswith("not live: http://127.0.0.1:9/v2/health/live: ")
