"""SIGTERM stops the service cleanly: mid-run (the open passes flushed) and during start-up;
no orphan process or shared-memory region, no task exception left unretrieved. How long it
takes is measured in the benchmark suite (bench/shutdown.py), not asserted here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from converters import assets
from converters.paths import PROJECT_ROOT

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
SHM = Path("/dev/shm")


def _start(config: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "streamer", "run", "--config", str(config)],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LPR_ASSETS_DIR": str(assets.default_assets_dir())},
    )


def _wait_for(process: subprocess.Popen[str], marker: str, seen: list[str]) -> None:
    assert process.stderr is not None
    for line in process.stderr:
        seen.append(line)
        if marker in line:
            return
    raise AssertionError(f"the service exited before {marker!r}: {''.join(seen)[-3000:]}")


def _stop(process: subprocess.Popen[str], seen: list[str]) -> tuple[str, str]:
    children = [p.pid for p in psutil.Process(process.pid).children(recursive=True)]
    process.send_signal(signal.SIGTERM)
    stdout, rest = process.communicate(timeout=120)
    stderr = "".join(seen) + rest
    assert process.returncode == 0, stderr[-3000:]
    for bad in ("Traceback", "Task exception was never retrieved", "was destroyed but"):
        assert bad not in stderr, stderr[-3000:]
    time.sleep(0.5)  # let init reap what the kernel already killed
    alive = [p for p in children if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert alive == [], f"left running: {alive}"
    assert not [p for p in SHM.glob(f"lpr_triton_{process.pid}_*")], "shared memory left"
    return stdout, stderr


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "service.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 5}}\n"
        "events: {stdout: true, max_delay_s: 60}\n"
        "metrics: {port: 0}\nweb: {port: 0}\n"
    )
    return config


def test_sigterm_mid_run_flushes_the_open_passes(tmp_path: Path) -> None:
    # max_delay_s 60: nothing is reported before the stop, the tracks are all open.
    process = _start(_config(tmp_path))
    seen: list[str] = []
    _wait_for(process, "camera yard: connected", seen)
    time.sleep(6)  # both cars tracked and read, the black one still in view
    stdout, stderr = _stop(process, seen)
    events = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert "O567AM76" in {e["text"] for e in events}, stderr[-3000:]
    black = next(e for e in events if e["text"] == "O567AM76")
    assert black["reason"] == "flush"  # reported because the service stopped


def test_sigterm_during_start_up_stops_there(tmp_path: Path) -> None:
    process = _start(_config(tmp_path))
    seen: list[str] = []
    _wait_for(process, "starting an embedded CPU Triton", seen)
    time.sleep(1)  # Triton is loading its models
    _, stderr = _stop(process, seen)
    assert "stopping during start-up" in stderr
    assert "running 1 camera" not in stderr
