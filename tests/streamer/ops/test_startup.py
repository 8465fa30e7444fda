"""Start-up failures a user can fix: one line saying what to do, the stated exit code, no
traceback. Each through the real command line (``python -m streamer``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from converters import assets
from converters.paths import PROJECT_ROOT
from streamer.inference.embedded.errors import TritonStartError
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.ops.startup import triton_start_error

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def _run(
    config: Path, *run_args: str, before: tuple[str, ...] = (), timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -m streamer [before] run --config CONFIG [run_args]``."""
    return subprocess.run(
        [sys.executable, "-m", "streamer", *before, "run", "--config", str(config), *run_args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "LPR_ASSETS_DIR": str(assets.default_assets_dir())},
    )


def _one_line_error(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr[-3000:]
    return errors[0]


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("key", ["metrics", "web"])
def test_a_port_in_use_is_one_line(tmp_path: Path, taken_port: int, key: str) -> None:
    other = "web: {enabled: false}" if key == "metrics" else "metrics: {enabled: false}"
    config = tmp_path / "ports.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}'}}\n"
        "triton: {url: '127.0.0.1:9'}\n"
        f"{key}: {{port: {taken_port}}}\n{other}\n"
    )
    line = _one_line_error(_run(config), 1)
    assert line.startswith(f"error: cannot listen on 127.0.0.1:{taken_port} ({key}.port): ")
    assert "already in use" in line


def test_an_unbuilt_model_repository_says_how_to_build_it(tmp_path: Path) -> None:
    empty = tmp_path / "repository"
    empty.mkdir()
    config = tmp_path / "embedded.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}'}}\n"
        f"triton: {{model_repository: '{empty}'}}\n"
        "metrics: {enabled: false}\nweb: {enabled: false}\n"
    )
    line = _one_line_error(_run(config), 1)
    assert f"the model repository {empty} is not built" in line and "make models" in line


def test_a_triton_that_did_not_start_is_one_line_with_its_first_error() -> None:
    first = "E0101 12:00:01.000000 1 model_lifecycle.cc:641] failed to load 'lprnet': " + "x" * 400
    exc = TritonStartError(
        "tritonserver exited with code 1 before it was ready (/models)",
        f"errors:\n{first}\nE0101 later\nlast log lines:\nI0101 loading",
        first_error=first,
    )
    assert str(triton_start_error(exc)) == (
        "the embedded Triton did not start: tritonserver exited with code 1 before it was ready "
        f"(/models): {first[:300]} (--log-level DEBUG shows its log)"
    )
    aborted = triton_start_error(TritonStartError("start() aborted by stop()"))
    assert str(aborted) == (
        "the embedded Triton did not start: start() aborted by stop() "
        "(--log-level DEBUG shows its log)"
    )


@pytest.mark.parametrize("damage", ["a folder", "not a database"])
def test_an_outbox_that_cannot_be_opened_says_how_to_recover(
    tmp_path: Path, triton_server: EmbeddedTriton, damage: str
) -> None:
    outbox = tmp_path / "outbox.sqlite3"
    if damage == "a folder":
        outbox.mkdir()
    else:
        outbox.write_bytes(b"this is not SQLite" * 100)
    config = tmp_path / "outbox.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}'}}\n"
        f"triton: {{url: '{triton_server.grpc_url}'}}\n"
        f"webhooks: [{{name: hook, url: 'http://127.0.0.1:9/', secret: {SECRET}}}]\n"
        f"outbox: {{path: '{outbox}'}}\n"
        "metrics: {enabled: false}\nweb: {enabled: false}\n"
    )
    line = _one_line_error(_run(config), 1)
    assert line.startswith(f"error: cannot open the outbox {outbox}: ")
    assert "move it away" in line and SECRET not in line


def test_a_bad_log_level_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "x.yaml"
    config.write_text(f"cameras:\n  - {{name: yard, url: '{CLIP}'}}\n")
    line = _one_line_error(_run(config, before=("--log-level", "NOPE")), 2)
    assert line == (
        "error: --log-level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got 'NOPE'"
    )


def test_once_fails_and_says_which_camera_never_delivered(
    tmp_path: Path, triton_server: EmbeddedTriton
) -> None:
    config = tmp_path / "once.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 5, realtime: false}}\n"
        f"  - {{name: gone, url: '{tmp_path / 'missing.ts'}'}}\n"
        f"triton: {{url: '{triton_server.grpc_url}'}}\n"
        "events: {stdout: false}\nmetrics: {enabled: false}\nweb: {enabled: false}\n"
    )
    done = _run(config, "--once")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    summary = {
        line.split(":", 1)[0]: line
        for line in done.stderr.splitlines()
        if line.startswith(("yard: ", "gone: "))
    }
    assert set(summary) == {"yard", "gone"}, done.stderr[-3000:]
    assert "2 events" in summary["yard"] and "never" not in summary["yard"]
    assert "0 frames decoded" in summary["gone"] and "never delivered a frame" in summary["gone"]


def test_once_fails_when_triton_never_answers(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "nobody.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 1, realtime: false}}\n"
        f"triton: {{url: '127.0.0.1:{port}', connect_timeout_s: 1, request_timeout_s: 0.5}}\n"
        "events: {stdout: false}\nmetrics: {enabled: false}\nweb: {enabled: false}\n"
    )
    done = _run(config, "--once")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("yard: ")]
    assert "0 answered" in line and "Triton answered none of its frames" in line
