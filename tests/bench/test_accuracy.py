"""bench/accuracy.py: its variants match its truth file, and ffmpeg builds what they say."""

from __future__ import annotations

import shutil
from pathlib import Path

import av
import pytest

from bench.accuracy import TRUTH, VARIANTS, build
from bench.common import source_clip
from streamer.cli.replay import load_truth


def test_every_variant_has_a_truth_and_every_truth_a_variant() -> None:
    assert sorted(load_truth(TRUTH)) == sorted(v.name for v in VARIANTS)
    assert len(VARIANTS) >= 12
    unreadable = [name for name, plates in load_truth(TRUTH).items() if not plates]
    assert unreadable == ["mirrored", "unreadable-blur", "unreadable-tiny"]


def _frames(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs Debian's ffmpeg")
def test_the_cut_and_the_held_variants_have_the_frames_they_say(tmp_path: Path) -> None:
    by_name = {v.name: v for v in VARIANTS}
    source = source_clip()
    assert _frames(source) == 120
    cut = build(by_name["cut"], source, tmp_path)
    assert _frames(cut) == 120 - 31  # frames 30-60 cut out
    held = build(by_name["held-start-4s-nogate"], source, tmp_path)
    assert _frames(held) == 120 + 4 * 15  # frame 12 shown 61 times instead of once
    assert build(by_name["cut"], source, tmp_path) == cut  # built once, then reused
    restart = build(by_name["camera-restart"], source, tmp_path)
    with av.open(str(restart)) as container:
        pts = [f.pts for f in container.decode(video=0)]
    assert len(pts) == 120 and pts[25] == pts[0] < pts[24]  # time starts afresh at frame 25
    assert not list(tmp_path.glob("*.part*"))  # its parts are gone
