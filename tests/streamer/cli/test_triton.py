"""``python -m streamer triton``: the CPU Triton on its own, as a user starts it for a site's
"remote" Triton; a real process, asked through gRPC, stopped by SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import tritonclient.grpc as grpcclient

from streamer.foundation.paths import BLS_MODEL, PROJECT_ROOT


def test_it_serves_the_repository_until_sigterm_then_leaves_nothing(tmp_path: Path) -> None:
    log = (tmp_path / "stderr.log").open("w")  # a file: Triton's log never fills a pipe
    command = subprocess.Popen(
        [sys.executable, "-m", "streamer", "triton", "--grpc-port", "0"],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert command.stdout is not None
        line = command.stdout.readline()  # blocks until ready (or the process ends)
        assert line.startswith("ready: 127.0.0.1:"), (line, (tmp_path / "stderr.log").read_text())
        url = line.split("ready: ", 1)[1].strip()
        client = grpcclient.InferenceServerClient(url)
        assert client.is_model_ready(BLS_MODEL)
        children = psutil.Process(command.pid).children(recursive=True)
        assert any("tritonserver" in c.name() for c in children)
        command.send_signal(signal.SIGTERM)
        assert command.wait(60) == 0
    finally:
        if command.poll() is None:
            command.kill()
            command.wait(10)
        log.close()
    deadline = time.monotonic() + 10
    while any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children):
        assert time.monotonic() < deadline, "tritonserver outlived the command"
        time.sleep(0.2)


def test_a_repository_that_is_not_built_is_one_line_and_exit_1(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streamer", "triton", "--model-repository", str(tmp_path)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert done.stdout == ""


def test_a_port_out_of_range_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streamer", "triton", "--grpc-port", "70000"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--grpc-port must be 0..65535" in done.stderr
