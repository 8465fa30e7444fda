"""The capacity phases for real: a smoke run of the overload ladder, and the clips they play.

``--quick --only O --ladder 2`` starts the suite's embedded Triton, measures both references
and one 2-camera step through real worker processes, three interleaved rounds (about three
minutes on 2 cores).
Only the shape of what it wrote is checked: its figures are not measurements (speed and
memory are benchmark figures, never assertions).
"""

from __future__ import annotations

import itertools
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
from streamer.ingest.motion import CHECK_WIDTH, MotionDetector, small_gray

LADDER_KEYS = {
    "O-saturated",
    "O-unloaded",
    "O2-rate",
    "O2-share",
    "O2-p99",
    "O2-capture",
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
    # three rounds, each running both references and the step once, in a rotated order
    assert len(ladder["schedule"]) == 3
    assert all(sorted(o) == ["2", "saturated", "unloaded"] for o in ladder["schedule"])
    assert len({tuple(o) for o in ladder["schedule"]}) == 3
    (rounds,) = ladder["steps"]
    assert [r["round"] for r in rounds] == [0, 1, 2]
    # the two cameras played different clips (different offsets), the references a third one
    assert len(set(ladder["clips"]["2"])) == 2
    for step in rounds:
        assert step["cameras"] == 2
        assert set(step["answered_per_camera"]) == {"cam0", "cam1"}
        assert step["window_s"] > 0 and step["latencies"] > 0 and step["captures"] > 0
        # capture to answer includes the time at Triton
        assert step["capture_p50_s"] >= step["latency_p50_s"]
        assert len(step["raw"]["series"]) >= 2  # the raw series behind the RSS figures
    assert all(r["window_limit_max"] == 1 for r in ladder["unloaded"])  # one frame in flight
    assert figures["O2-rate"]["denominator"]["samples"] == [
        min(10.0, r["answered_fps"]) for r in ladder["saturated"]
    ]
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


def _gate_moves(path: Path) -> list[int]:
    """Frames of ``path`` the motion gate's detector (default settings) sees as motion."""
    detector = MotionDetector(threshold=20, min_area=0.0005, mask=[])
    with av.open(str(path)) as container:
        return [
            i
            for i, frame in enumerate(container.decode(video=0))
            if detector.update(small_gray(frame, CHECK_WIDTH), (frame.width, frame.height))
        ]


def test_the_gated_clip_is_real_stillness_around_the_real_one(tmp_path: Path) -> None:
    clip = clips.gated_clip(source_clip(), 2.0, tmp_path)
    source_frames = count_frames(source_clip())
    frames = _gray(clip)
    still = 2 * int(CLIP_FPS)
    assert len(frames) == 2 * still + source_frames
    for stretch in (frames[:still], frames[-still:]):
        # sensor noise: no two consecutive still frames are the same picture ...
        assert all(np.any(b != a) for a, b in itertools.pairwise(stretch))
        # ... and the stretch is not one frame looped
        assert np.mean([np.abs(b - a).mean() for a, b in itertools.pairwise(stretch)]) > 0.05
    # the stretches' noise is their own, not a copy of each other
    assert np.abs(frames[still // 2] - frames[-still // 2]).mean() > 0.05
    # the gate sees no motion in the still (its first frame sets the reference; the frame
    # where the clip cuts to the still's blurred plate counts): the silver car moves
    moves = _gate_moves(clip)
    assert [i for i in moves if i < still] == [0]
    assert [i for i in moves if i > still + source_frames] == []
    assert any(still < i < still + source_frames for i in moves)


def test_the_mix_staggers_the_cameras_vehicles(tmp_path: Path) -> None:
    paths = clips.mix_clips(source_clip(), 4, 2, tmp_path)
    assert len(paths) == 2 and paths[0] != paths[1]
    source_frames = count_frames(source_clip())
    first, second = (_gray(p) for p in paths)
    assert len(first) == len(second) == 4 * int(CLIP_FPS) + source_frames
    # camera 1's clip starts with 2 s of still; camera 0's with the vehicles
    offset = 2 * int(CLIP_FPS)
    assert [i for i in _gate_moves(paths[1]) if i < offset] == [0]  # still, its noise aside
    assert all(np.any(b != a) for a, b in itertools.pairwise(second[:offset]))
    assert np.abs(second[offset + 40] - first[40]).mean() < 1.5  # the clip, re-encoded alike


def test_a_rotated_clip_starts_where_its_offset_says(tmp_path: Path) -> None:
    source = _gray(source_clip())
    rotated = _gray(clips.rotated_clip(source_clip(), 60, tmp_path / "r.ts"))
    assert len(rotated) == len(source)
    # re-encoded, so not bit-exact: nearer the source frame it shows than to any other
    near, far = np.abs(rotated[0] - source[60]).mean(), np.abs(rotated[0] - source[0]).mean()
    assert near < far
    assert np.abs(rotated[60] - source[0]).mean() < np.abs(rotated[60] - source[60]).mean()
