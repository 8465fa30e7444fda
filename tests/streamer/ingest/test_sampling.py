"""streamer.ingest.sampling: the sampler on timestamps, then sampling, pacing and
non-reference skipping through a CameraSource on real footage: no mocks."""

from __future__ import annotations

import itertools
import subprocess
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from streamer.ingest.frame_queue import FrameQueue
from streamer.ingest.sampling import EVERY_FRAME, Sampler
from tests.footage import sample_times
from tests.streamer.ingest.sources import CLIP_FRAMES, drain, make_source

TB = Fraction(1, 90_000)  # an MPEG-TS time base
TICKS_15FPS = 6_000


def _times(sampler: Sampler, pts: list[int | None]) -> list[float]:
    return [sampler.stream_time(p, TB if p is not None else None) for p in pts]


def test_5_of_15_fps_keeps_every_third_frame_and_a_gap_does_not_burst() -> None:
    sampler = Sampler(5, 15.0, skip_non_reference=False)
    pts = [i * TICKS_15FPS for i in [*range(9), *range(30, 34)]]  # 0.53 s, then 2 s on
    kept = [t for t in _times(sampler, pts) if sampler.keep(t)]
    # 0, 0.2, 0.4; then 2 s later the first frame at once, and the next a slot later.
    assert kept == pytest.approx([0.0, 0.2, 0.4, 2.0, 2.2])
    assert sampler.frames == len(pts)


def test_missing_pts_is_extrapolated_and_time_going_back_restarts_the_slots() -> None:
    sampler = Sampler(5, 15.0, skip_non_reference=False)
    times = _times(sampler, [None, None, 6 * TICKS_15FPS, None])
    assert times == pytest.approx([0.0, 1 / 15, 0.4, 0.4 + 1 / 15])
    assert [sampler.keep(t) for t in times] == [True, False, True, False]
    (back,) = _times(sampler, [TICKS_15FPS])  # a file loop, a wrap: kept at once
    assert sampler.keep(back)


def test_every_frame_keeps_each_frame_even_at_the_same_time() -> None:
    sampler = Sampler(EVERY_FRAME, None, skip_non_reference=True)
    for pts in (0, 3_000, 3_000, 9_000, 1_000):  # a repeated time, then time going back
        assert sampler.keep(sampler.stream_time(pts, TB)), pts
    assert not sampler.skipping_non_reference  # nothing to skip when every frame is wanted


def test_pace_waits_for_stream_time_and_re_anchors_on_a_jump() -> None:
    sampler = Sampler(5, 15.0, skip_non_reference=False)
    assert sampler.pace(10.0, now=100.0) == 0.0  # the anchor
    assert sampler.pace(10.2, now=100.05) == pytest.approx(0.15)
    assert sampler.pace(10.4, now=101.0) == 0.0  # late, within a second: at once
    assert sampler.pace(30.0, now=101.1) == 0.0  # 20 s ahead: re-anchored, no sleep
    assert sampler.pace(30.2, now=101.1) == pytest.approx(0.2)
    assert sampler.pace(30.4, now=103.0) == 0.0  # 1.7 s behind: re-anchored, no burst
    assert sampler.pace(30.6, now=103.0) == pytest.approx(0.2)


@pytest.mark.parametrize(("every_nth_reference", "too_low"), [(2, False), (4, True)])
def test_skipping_stops_once_when_reference_frames_are_too_sparse(
    every_nth_reference: int, too_low: bool
) -> None:
    """At 15 fps, one frame in two left (7.5 fps) is enough for 5 fps; one in four (3.75 fps)
    is not: decided once, after 2 s of stream time."""
    sampler = Sampler(5, 15.0, skip_non_reference=True)
    assert sampler.skipping_non_reference
    verdicts = []
    for i in range(0, 90, every_nth_reference):  # 6 s of the reference frames
        t = sampler.stream_time(i * TICKS_15FPS, TB)
        verdicts.append(sampler.reference_rate_too_low(t))
    decided = [v for v in verdicts if v is not None]
    if too_low:
        assert len(decided) == 1 and decided[0] == pytest.approx(15 / 4, rel=0.1)
    else:
        assert decided == []
    assert sampler.skipping_non_reference is not too_low


# --------------------------------------------------------------------------- files


async def test_file_sampled_at_5_fps_gives_every_third_frame_as_bgr(clip: Path) -> None:
    queue = FrameQueue(4, "wait")
    source = make_source(clip, queue)
    source.start()
    frames = await drain(queue)
    await source.astop()

    assert abs(len(frames) - CLIP_FRAMES / 3) <= 1
    assert [f.index for f in frames] == list(range(len(frames)))
    pts = [f.pts_s for f in frames]
    assert all(b > a for a, b in itertools.pairwise(pts))
    assert np.allclose(np.diff(pts), 0.2, atol=1e-3)
    first = frames[0]
    # Queued as decoded: converted to BGR only when its image is asked for, then kept.
    assert not isinstance(first.pixels, np.ndarray) and (first.width, first.height) == (1920, 1080)
    assert first.image is first.image and isinstance(first.pixels, np.ndarray)
    assert first.image.shape == (1080, 1920, 3) and first.image.dtype == np.uint8
    assert (first.width, first.height, first.camera) == (1920, 1080, "cam")
    assert all(b.monotonic >= a.monotonic for a, b in itertools.pairwise(frames))
    assert abs(first.wall_time - time.time()) < 60
    stats = source.stats
    assert (stats.decoded, stats.sampled, stats.dropped) == (CLIP_FRAMES, len(frames), 0)
    assert (stats.state, stats.decode_errors, stats.reconnects) == ("ended", 0, 0)
    assert stats.last_error is None
    assert not source.running


async def test_non_reference_frames_are_not_decoded_when_sampling_far_below_fps(
    clip: Path,
) -> None:
    """At 5 of 15 fps the clip's B-frames are skipped: about half the frames decoded, and
    the samples still come at about 5 per second of stream time."""
    queue = FrameQueue(4, "wait")
    source = make_source(clip, queue, skip_non_reference=True)
    source.start()
    frames = await drain(queue)
    await source.astop()
    stats = source.stats
    assert stats.skipping_non_reference
    assert CLIP_FRAMES * 0.4 <= stats.decoded <= CLIP_FRAMES * 0.6, stats.decoded
    pts = [f.pts_s for f in frames]
    rate = (len(pts) - 1) / (pts[-1] - pts[0])
    assert 4.0 <= rate <= 5.0, rate
    assert all(0.13 <= b - a <= 0.27 for a, b in itertools.pairwise(pts)), np.diff(pts)
    assert [f.index for f in frames] == list(range(len(frames)))
    # Close to the frame rate, every frame is decoded: nothing to skip.
    queue = FrameQueue(4, "wait")
    dense = make_source(clip, queue, sample_fps=10, skip_non_reference=True)
    dense.start()
    await drain(queue)
    await dense.astop()
    assert dense.stats.decoded == CLIP_FRAMES and not dense.stats.skipping_non_reference


@pytest.fixture(scope="module")
def sparse_references(clip: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6 s of the clip re-encoded with three non-reference B-frames between P-frames."""
    out = tmp_path_factory.mktemp("media") / "bframes3.ts"
    subprocess.run(
        ["ffmpeg", "-hide_banner", "-loglevel", "error", "-i", str(clip), "-t", "6",
         "-vf", "scale=640:360", "-c:v", "libx264", "-bf", "3",
         "-x264-params", "b-adapt=0:b-pyramid=none", "-g", "300", "-y", str(out)],
        check=True,
    )  # fmt: skip
    return out


async def test_sparse_reference_frames_are_decoded_all_again(sparse_references: Path) -> None:
    """Three B-frames between P-frames at 15 fps leave 3.75 reference fps, too few for 5 fps:
    after the 2 s check every frame is decoded again."""
    sparse = sparse_references
    queue = FrameQueue(4, "wait")
    source = make_source(sparse, queue, skip_non_reference=True)
    source.start()
    frames = await drain(queue)
    await source.astop()
    assert not source.stats.skipping_non_reference
    pts = [f.pts_s for f in frames]
    late = [p for p in pts if p - pts[0] > 2.5]  # after the check: every slot kept
    assert np.allclose(np.diff(late), 0.2, atol=1e-3), np.diff(late)


async def test_realtime_paces_by_pts(short_clip: Path) -> None:
    queue = FrameQueue(4, "wait")
    source = make_source(short_clip, queue, realtime=True)
    started = time.monotonic()
    source.start()
    frames = await drain(queue)
    elapsed = time.monotonic() - started
    await source.astop()
    expected = sample_times(short_clip, 5)
    assert [f.pts_s for f in frames] == pytest.approx(expected)
    span = expected[-1] - expected[0]  # about 2 s; as fast as possible takes about 0.2 s
    assert span >= 1.8
    assert span - 0.3 <= elapsed < span + 4, elapsed
    assert span - 0.3 <= frames[-1].monotonic - frames[0].monotonic < span + 1.5
    gaps = np.diff([f.monotonic for f in frames])
    assert gaps.min() > 0.1, gaps
