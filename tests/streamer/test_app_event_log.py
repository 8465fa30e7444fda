"""The event log from the service's side, on real parts (the clip, a real CPU Triton, a real
webhook receiver, the SQLite history): ``--once`` waits for every consumer and says what it
delivered and what is left; one service per log."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from converters import assets
from converters.paths import PROJECT_ROOT
from streamer.app import EXIT_EVENTS_LEFT, Service
from streamer.config import load_config
from streamer.inference.embedded.server import EmbeddedTriton
from tests.webhook_receiver import Receiver, answer, new_secret

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
PLATES = ["O567AM76", "Y836XH76"]


def _config(triton_url: str, receiver_url: str, secret: str, *, loop: bool = False) -> str:
    realtime = "true" if loop else "false"
    return (
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 5, realtime: {realtime}}}\n"
        f"triton: {{url: '{triton_url}'}}\n"
        "events: {stdout: false}\nmetrics: {enabled: false}\nweb: {enabled: false}\n"
        f"webhooks:\n  - {{name: rx, url: '{receiver_url}', secret: '{secret}'}}\n"
    )


async def test_once_delivers_to_a_receiver_that_fails_first_then_exits_0(
    triton_server: EmbeddedTriton, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The receiver answers 500 to its first 3 POSTs: both events are delivered before the
    run exits, with 0, and the summary has a line per consumer."""
    secret = new_secret()
    receiver = await Receiver(secret).start()
    receiver.script += [answer(500, "deploying")] * 3
    try:
        path = tmp_path / "site.yaml"
        path.write_text(_config(triton_server.grpc_url, receiver.url, secret))
        code = await Service(load_config(path), once=True).run()
    finally:
        await receiver.stop()
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    assert len(receiver.requests) >= 5  # the 3 failures were retried
    assert sorted(r.payload["text"] for r in receiver.delivered()) == PLATES
    assert "consumer rx: 2 delivered\n" in err and "consumer history: 2 delivered\n" in err


async def test_once_with_events_left_says_so_and_exits_3(
    triton_server: EmbeddedTriton, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A receiver that fails throughout: after ``--drain-timeout`` the run says what is
    left and where, exits 3, and the next start delivers it."""
    secret = new_secret()
    receiver = await Receiver(secret).start()
    receiver.default = answer(503, "down")
    try:
        path = tmp_path / "site.yaml"
        path.write_text(_config(triton_server.grpc_url, receiver.url, secret))
        code = await Service(load_config(path), once=True, drain_timeout_s=2.0).run()
        err = capsys.readouterr().err
        assert code == EXIT_EVENTS_LEFT, err[-2000:]
        outbox = tmp_path / "data" / "outbox.sqlite3"
        assert f"consumer rx: 0 delivered, 2 left after 2 s (kept in {outbox}" in err
        assert "consumer history: 2 delivered\n" in err
        assert receiver.delivered() == []
        receiver.default = answer(204)
        again = await Service(load_config(path), once=True).run()  # plays the clip again too
        err = capsys.readouterr().err
    finally:
        await receiver.stop()
    assert again == 0, err[-2000:]
    assert "consumer rx: 4 delivered\n" in err  # the 2 left, and the 2 of this run
    assert sorted(r.payload["text"] for r in receiver.delivered()) == sorted(PLATES * 2)


def test_a_second_service_on_the_same_log_is_refused_in_one_line(
    triton_server: EmbeddedTriton, tmp_path: Path
) -> None:
    secret = new_secret()
    path = tmp_path / "site.yaml"
    path.write_text(_config(triton_server.grpc_url, "http://127.0.0.1:9/hook", secret, loop=True))
    env = {**os.environ, "LPR_ASSETS_DIR": str(assets.default_assets_dir())}
    command = [sys.executable, "-m", "streamer", "run", "--config", str(path)]
    first = subprocess.Popen(
        command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        lock = tmp_path / "data" / "outbox.sqlite3.lock"
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().startswith("pid")):
            assert time.monotonic() < deadline and first.poll() is None, "the first did not start"
            time.sleep(0.1)
        second = subprocess.run(
            command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert second.returncode == 1
        errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
        outbox = tmp_path / "data" / "outbox.sqlite3"
        assert errors == [
            f"error: outbox {outbox} is in use by another service (pid {first.pid} on "
            f"{socket.gethostname()}): one service per outbox; give each its own outbox.path"
        ], second.stderr[-2000:]
        assert first.poll() is None  # the first runs on
    finally:
        first.terminate()
        first.wait(60)
    assert first.returncode == 0
