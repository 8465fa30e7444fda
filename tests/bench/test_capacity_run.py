"""The capacity phases for real: a smoke run of the overload ladder, and the clips they play.

``--quick --only O --ladder 2`` starts the suite's embedded Triton, measures both references
and one 2-camera step through real worker processes (about a minute and a half on 2 cores).
Only the shape of what it wrote is checked: its figures are not measurements (speed and
memory are benchmark figures, never assertions).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from bench import clips, run_all
from bench.common import CLIP_FPS, PROJECT_ROOT, count_frames, source_clip

LADDER_KEYS = {
    "O-saturated",
    "O-unloaded",
    "O2-rate",
    "O2-share",
    "O2-p99",
    "O2-rss",
    "O2-triton-rss",
    "O-wrong-text",
}


@pytest.fixture(scope="module")
def ladder_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("capacity")
    doc, raw = folder / "PERF.md", folder / "raw.json"
    command = [sys.executable, "-m", "bench", "--quick", "--only", "O", "--ladder", "2"]
    result = subprocess.run(
        [*command, "--doc", str(doc), "--json", str(raw)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return doc, raw, json.loads(raw.read_text())


def test_the_ladder_measures_both_references_and_every_step(
    ladder_run: tuple[Path, Path, dict[str, Any]],
) -> None:
    _, _, data = ladder_run
    figures = {f["key"]: f for f in data["figures"]}
    assert set(figures) == LADDER_KEYS
    assert {f["verdict"] for f in figures.values()} <= {"PASS", "MISS", "info"}
    ladder = data["raw"]["overload_ladder"]
    (step,) = ladder["steps"]
    assert step["cameras"] == 2
    assert set(step["answered_per_camera"]) == {"cam0", "cam1"}
    assert step["window_s"] > 0 and step["latencies"] > 0
    assert ladder["unloaded"]["window_limit_max"] == 1  # one frame in flight, as configured
    assert figures["O2-rate"]["denominator"]["samples"] == [
        min(10.0, ladder["saturated"]["answered_fps"])
    ]
    # the raw series behind the RSS figures are kept
    assert len(step["raw"]["series"]) >= 2
    assert data["meta"]["plan"]["ladder"] == [2]


def test_the_document_has_the_ladder_and_renders_again(
    ladder_run: tuple[Path, Path, dict[str, Any]], tmp_path: Path
) -> None:
    doc, raw, _ = ladder_run
    text = doc.read_text()
    assert any(line.startswith("| O2-rate |") for line in text.splitlines())
    assert any(line.startswith("| 2 | 10 |") for line in text.splitlines())
    again = tmp_path / doc.name
    assert run_all.main(["--render", str(raw), "--doc", str(again)]) == 0
    assert again.read_text() == text


def _gray(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [f.to_ndarray(format="gray").astype(np.int16) for f in container.decode(video=0)]


def test_the_gated_clip_is_still_around_the_real_one(tmp_path: Path) -> None:
    clip = clips.gated_clip(source_clip(), 1.0, tmp_path)
    source_frames = count_frames(source_clip())
    frames = _gray(clip)
    still = int(CLIP_FPS)
    assert len(frames) == 2 * still + source_frames
    # the still stretches are one picture (what the gate sees as no motion) ...
    for stretch in (frames[:still], frames[-still:]):
        assert max(int(np.abs(f - stretch[0]).max()) for f in stretch) <= 8
    # ... the real clip is not: the silver car drives off
    assert np.abs(frames[still + 40] - frames[still]).mean() > 1.0


def test_the_mix_staggers_the_cameras_vehicles(tmp_path: Path) -> None:
    paths = clips.mix_clips(source_clip(), 4, 2, tmp_path)
    assert len(paths) == 2 and paths[0] != paths[1]
    source_frames = count_frames(source_clip())
    first, second = (_gray(p) for p in paths)
    assert len(first) == len(second) == 4 * int(CLIP_FPS) + source_frames
    # camera 1's clip starts with 2 s of still; camera 0's with the vehicles
    offset = 2 * int(CLIP_FPS)
    assert np.abs(second[offset - 1] - second[0]).max() <= 8
    assert np.abs(second[offset + 40] - first[40]).mean() < 1.0
