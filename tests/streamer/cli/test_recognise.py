"""``python -m streamer recognise``: the real command, on real footage, against a real Triton
(the session's embedded one through ``--triton-url``, or one of its own without)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from converters import assets
from converters.paths import PROJECT_ROOT
from streamer.inference.embedded.server import EmbeddedTriton

CLIP_FRAMES, CLIP_FPS = 120, 15  # yard_cam.ts
PLATES = {"O567AM76", "Y836XH76"}
KEYS = {"frame", "time_s", "text", "valid", "text_score", "det_score", "box"}


def _recognise(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python -X importtime -m streamer recognise ARGS``: stderr also lists every import."""
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "streamer", "recognise", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "LPR_ASSETS_DIR": str(assets.default_assets_dir())},
    )


def _plates(stdout: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert all(set(row) == KEYS for row in rows), rows[:3]
    return rows


def _imported(stderr: str) -> set[str]:
    """The modules ``-X importtime`` saw imported."""
    return {
        line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if "import time:" in line
    }


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def clip() -> Path:
    return assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())


def test_every_third_frame_of_a_clip_in_frame_order(
    clip: Path, triton_server: EmbeddedTriton
) -> None:
    done = _recognise(str(clip), "--every", "3", "--triton-url", triton_server.grpc_url)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _plates(done.stdout)
    frames = [row["frame"] for row in rows]
    assert frames == sorted(frames) and set(frames) <= set(range(0, CLIP_FRAMES, 3))
    assert f"{CLIP_FRAMES // 3} frames answered, 0 failed" in done.stderr
    first = rows[0]
    for row in rows:  # stream time: the first frame's, plus 1/15 s a frame
        expected = first["time_s"] + (row["frame"] - first["frame"]) / CLIP_FPS
        assert row["time_s"] == pytest.approx(expected, abs=2e-3)
    assert {row["text"] for row in rows if row["valid"]} == PLATES
    for row in rows:
        x1, y1, x2, y2 = row["box"]
        assert 0 <= x1 < x2 <= 1920 and 0 <= y1 < y2 <= 1080
        assert 0 < row["det_score"] <= 1 and 0 < row["text_score"] <= 1
    # A Triton of its own: the embedded one is never imported.
    imported = _imported(done.stderr)
    assert "streamer.cli.recognise" in imported and "streamer.ingest.source" in imported
    assert not [m for m in imported if m.startswith("streamer.inference.embedded")]


def test_an_image_on_an_embedded_triton_of_its_own() -> None:
    """No --triton-url: the command starts a CPU Triton on model_repository/, then stops it."""
    car = assets.verify(assets.asset("car.jpg"), assets.default_assets_dir())
    done = _recognise(str(car))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "starting the embedded Triton" in done.stderr
    assert "streamer.inference.embedded.server" in _imported(done.stderr)  # imported here
    rows = _plates(done.stdout)
    assert {(row["frame"], row["time_s"]) for row in rows} == {(0, 0.0)}
    assert [row["text"] for row in rows if row["valid"]] == ["B840OK197"]
    assert "1 frames answered, 0 failed" in done.stderr


def test_a_file_that_is_not_a_video_fails(tmp_path: Path, triton_server: EmbeddedTriton) -> None:
    bogus = tmp_path / "not_a_video.ts"
    bogus.write_bytes(b"\x00" * 10_000)
    done = _recognise(str(bogus), "--triton-url", triton_server.grpc_url, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert "cannot open" in done.stderr and "InvalidData" in done.stderr


def test_no_triton_fails_at_the_timeout(clip: Path) -> None:
    url = f"127.0.0.1:{_closed_port()}"
    done = _recognise(str(clip), "--triton-url", url, "--timeout", "3", timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert "not done within --timeout 3 s" in done.stderr
    assert "Traceback" not in done.stderr


def test_usage_errors_exit_2(clip: Path) -> None:
    for args, message in (
        (["missing.ts"], "missing.ts does not exist"),
        ([str(clip), "--every", "0"], "--every must be 1 or more, got 0"),
    ):
        done = _recognise(*args, "--triton-url", "127.0.0.1:1", timeout=60)
        assert done.returncode == 2, args
        assert f"error: {message}" in done.stderr and "Traceback" not in done.stderr
