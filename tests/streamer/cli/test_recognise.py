"""``python -m streamer recognise``: the real command, on real footage, against a real Triton
(the session's embedded one through ``--triton-url``, or one of its own without)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from converters import assets
from converters.paths import PROJECT_ROOT
from streamer.cli import main as cli
from streamer.inference.embedded.server import EmbeddedTriton

if TYPE_CHECKING:
    from tests.conftest import SpareTriton

CLIP_FRAMES, CLIP_FPS = 120, 15  # yard_cam.ts
PLATES = {"O567AM76", "Y836XH76"}
KEYS = {"frame", "time_s", "stream_time_s", "text", "valid", "text_score", "det_score", "box"}
CLIP_START_S = 12169.533  # yard_cam.ts: the MPEG-TS clock of its first frame


def _recognise(
    *args: str, timeout: float = 600, importtime: bool = True
) -> subprocess.CompletedProcess[str]:
    """``python -X importtime -m streamer recognise ARGS``: stderr also lists every import
    (unless ``importtime`` is False)."""
    python = [sys.executable, "-X", "importtime"] if importtime else [sys.executable]
    return subprocess.run(
        [*python, "-m", "streamer", "recognise", *args],
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


def _bar_shown(stderr: str) -> bool:
    """Whether tqdm drew a progress bar: ``12%|█▏  | 15/120 [...]``, or with no total
    ``3frame [00:02, 1.50frame/s]`` (``s/frame`` when slower)."""
    return re.search(r"\d+%\||frame/s\]|s/frame\]", stderr) is not None


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
    """The plates on stdout, in frame order, timed from the file's start; the progress bar,
    forced on, on stderr only."""
    done = _recognise(
        str(clip), "--every", "3", "--triton-url", triton_server.grpc_url, "--progress"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _plates(done.stdout)  # every line of stdout is a plate: no bar there
    frames = [row["frame"] for row in rows]
    assert frames == sorted(frames) and set(frames) <= set(range(0, CLIP_FRAMES, 3))
    assert f"{CLIP_FRAMES // 3} frames answered, 0 failed" in done.stderr
    for row in rows:  # from the file's start, 1/15 s a frame; beside it, the stream's clock
        assert row["time_s"] == pytest.approx(row["frame"] / CLIP_FPS, abs=2e-3)
        assert row["stream_time_s"] == pytest.approx(CLIP_START_S + row["time_s"], abs=2e-3)
    assert rows[0]["frame"] == 0 and rows[0]["time_s"] == 0.0
    assert 0 < rows[-1]["time_s"] < CLIP_FRAMES / CLIP_FPS
    assert {row["text"] for row in rows if row["valid"]} == PLATES
    for row in rows:
        x1, y1, x2, y2 = row["box"]
        assert 0 <= x1 < x2 <= 1920 and 0 <= y1 < y2 <= 1080
        assert 0 < row["det_score"] <= 1 and 0 < row["text_score"] <= 1
    # The bar, out of the container's 120 frames (8 s at 15 fps), ends at all of them.
    assert f"{clip.name}:   0%|" in done.stderr
    assert f"| {CLIP_FRAMES}/{CLIP_FRAMES} [" in done.stderr
    # A Triton of its own: the embedded one is never imported.
    imported = _imported(done.stderr)
    assert "streamer.cli.recognise" in imported and "streamer.ingest.source" in imported
    assert not [m for m in imported if m.startswith("streamer.inference.embedded")]


def test_an_image_on_an_embedded_triton_of_its_own() -> None:
    """No --triton-url: the command starts a CPU Triton on model_repository/, then stops it."""
    car = assets.verify(assets.asset("car.jpg"), assets.default_assets_dir())
    done = _recognise(str(car), "--progress")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "starting the embedded Triton" in done.stderr
    assert "streamer.inference.embedded.server" in _imported(done.stderr)  # imported here
    rows = _plates(done.stdout)
    assert {(row["frame"], row["time_s"], row["stream_time_s"]) for row in rows} == {(0, 0, 0)}
    assert not _bar_shown(done.stderr)  # one frame: no progress bar, even when asked for
    assert [row["text"] for row in rows if row["valid"]] == ["B840OK197"]
    assert "1 frames answered, 0 failed" in done.stderr


def test_a_file_that_is_not_a_video_fails(tmp_path: Path, triton_server: EmbeddedTriton) -> None:
    bogus = tmp_path / "not_a_video.ts"
    bogus.write_bytes(b"\x00" * 10_000)
    done = _recognise(str(bogus), "--triton-url", triton_server.grpc_url, "--progress", timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert "cannot open" in done.stderr and "InvalidData" in done.stderr
    assert not _bar_shown(done.stderr)  # not a video: no progress bar


def test_the_timeout_ends_the_run_with_no_bar_off_a_terminal(
    clip: Path, triton_server: EmbeddedTriton
) -> None:
    """Not all 40 frames are answered within 2 s; the plates of those that were are printed.
    stderr is a pipe here, so no progress bar unless asked for."""
    done = _recognise(
        str(clip), "--triton-url", triton_server.grpc_url, "--timeout", "2", importtime=False
    )
    assert done.returncode == 1
    assert "not done within --timeout 2 s" in done.stderr and "Traceback" not in done.stderr
    rows = _plates(done.stdout)
    assert [row["frame"] for row in rows] == sorted(row["frame"] for row in rows)
    assert not _bar_shown(done.stderr)


def test_ctrl_c_exits_130_and_cleans_up(clip: Path, triton_server: EmbeddedTriton) -> None:
    """SIGINT once the first plate is out: exit 130, no traceback, whole lines on stdout."""
    # A child inherits an ignored SIGINT (a test run started in the background by a shell
    # without job control ignores it), and Python then leaves it ignored: the child restores
    # Python's own handler first, as a terminal's child would have it.
    as_from_a_terminal = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv[0] = 'streamer'; runpy.run_module('streamer', run_name='__main__')"
    )
    proc = subprocess.Popen(
        [
            *(sys.executable, "-c", as_from_a_terminal, "recognise", str(clip), "--every", "1"),
            *("--triton-url", triton_server.grpc_url, "--progress"),
        ],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())  # waits for the first plate
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert first["frame"] == 0
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and _bar_shown(err)
    _plates(out)  # what came after the first line is still whole JSON lines


async def test_triton_killed_mid_file_ends_the_run_with_one_line(
    clip: Path, spare_triton: SpareTriton
) -> None:
    """kill -9 of the Triton once the first plate is out: the run ends once the stream has
    stayed down (not at --timeout, 600 s), exit 1; the failed frames' error is logged once
    per kind (not once per frame in flight) and counted in the last line."""
    server = await spare_triton.running()
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "streamer", "recognise", str(clip), "--every", "1"),
        *("--triton-url", server.grpc_url, "--no-progress"),
        cwd=PROJECT_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        json.loads(await proc.stdout.readline())  # the first plate: Triton answers
        os.kill(server.pid, signal.SIGKILL)  # type: ignore[arg-type]
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    stderr = err.decode()
    assert proc.returncode == 1, stderr[-3000:]
    assert f"error: lost Triton at {server.grpc_url} (" in stderr, stderr[-3000:]
    assert "not done within --timeout" not in stderr
    logged = re.findall(r"frame \d+: .*\(later (\w+) errors are counted, not logged\)", stderr)
    assert len(logged) == len(set(logged)), stderr[-3000:]  # at most once per kind
    summary = re.search(r"\d+ frames answered, (\d+) failed(?: \((.+)\))?\n", stderr)
    assert summary is not None, stderr[-3000:]
    counts = dict(part.split(": ") for part in (summary[2] or "").split(", ") if part)
    assert set(counts) == set(logged)
    assert sum(map(int, counts.values())) <= int(summary[1])
    assert "Traceback" not in stderr
    _plates(out.decode())  # stdout is still whole JSON lines


def test_no_triton_is_one_line_and_exit_1(clip: Path) -> None:
    url = f"127.0.0.1:{_closed_port()}"
    done = _recognise(str(clip), "--triton-url", url, timeout=60, importtime=False)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: cannot reach Triton at {url} (")
    assert "Connection refused" in done.stderr and "is that its gRPC port?" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.ts"], "error: missing.ts does not exist"),
        (["{clip}", "--every", "0"], "argument --every: must be 1 or more, got 0"),
        (["{clip}", "--every", "two"], "argument --every: expected a whole number, got 'two'"),
        (["{clip}", "--timeout", "0"], "argument --timeout: must be above 0 seconds, got 0"),
        (["{clip}", "--timeout", "-1"], "argument --timeout: must be above 0 seconds, got -1"),
        (
            ["{clip}", "--triton-url", "http://127.0.0.1:8001"],
            "argument --triton-url: expected host:port without a scheme (e.g. 'triton:8001'), "
            "got 'http://127.0.0.1:8001'",
        ),
        (["{clip}", "--triton-url", "triton"], "argument --triton-url: expected host:port"),
        (["{clip}", "--triton-url", "triton:0"], "port must be 1-65535, got 0"),
    ],
)
def test_usage_errors_exit_2(
    clip: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command line as ``python -m streamer`` parses it, in this process."""
    args = [arg.format(clip=clip) for arg in args]
    if "--triton-url" not in args:
        args += ["--triton-url", "127.0.0.1:1"]  # never reached: the arguments fail first
    try:
        code = cli.main(["recognise", *args])
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert code == 2, args
    assert message in err and "Traceback" not in err
    assert out == ""
