"""streamer.ingest.source against real footage and a real GStreamer RTSP server: no mocks.

The RTSP half needs Debian's ``python3-gi`` and ``gir1.2-gst-rtsp-server-1.0`` (see
tests/rtsp_server.py); it is skipped, saying so, where they are missing.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import av
import numpy as np
import pytest

from converters import assets
from streamer.domain.frames import Frame
from streamer.ingest.frame_queue import FrameQueue
from streamer.ingest.source import CameraSource
from tests.footage import sample_times
from tests.rtsp_server import SYSTEM_PYTHON, RtspServer

CLIP_FRAMES = 120  # yard_cam.ts: 1920x1080 H.264, 15 fps, one keyframe, B-frames
TS_PACKET = 188


@pytest.fixture(scope="module")
def clip() -> Path:
    return assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())


@pytest.fixture(scope="module")
def short_clip(clip: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 2 s of the clip (30 frames), remuxed without re-encoding."""
    out = tmp_path_factory.mktemp("media") / "yard_2s.ts"
    _cut(clip, out, 2.0)
    return out


def _cut(src: Path, dst: Path, seconds: float) -> None:
    with av.open(str(src)) as inp, av.open(str(dst), "w", format="mpegts") as out:
        stream_in = inp.streams.video[0]
        stream_out = out.add_stream_from_template(stream_in)
        time_base = stream_in.time_base
        assert time_base is not None
        first = None
        for packet in inp.demux(stream_in):
            if packet.dts is None:  # the flush packets at the end
                continue
            first = packet.dts if first is None else first
            if (packet.dts - first) * time_base >= seconds:
                break
            packet.stream = stream_out
            out.mux(packet)


def _source(url: str | Path, queue: FrameQueue, **kwargs: object) -> CameraSource:
    options: dict = {"sample_fps": 5, "realtime": False, "loop_file": False}
    options.update(kwargs)
    return CameraSource("cam", str(url), queue=queue, **options)


async def _drain(queue: FrameQueue, timeout_s: float = 20) -> list[Frame]:
    frames = []
    async with asyncio.timeout(timeout_s):
        while (frame := await queue.get()) is not None:
            frames.append(frame)
    return frames


async def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Seconds until ``predicate()`` held (polled every 20 ms); fails after ``timeout_s``."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.02)
    return time.monotonic() - started


class _Collector:
    """Drains a queue in a task, as the pipeline would."""

    def __init__(self, queue: FrameQueue) -> None:
        self.queue = queue
        self.frames: list[Frame] = []
        self.task = asyncio.create_task(self._run(), name="collector")

    async def _run(self) -> None:
        while (frame := await self.queue.get()) is not None:
            self.frames.append(frame)

    async def more(self, count: int, timeout_s: float, what: str) -> list[Frame]:
        start = len(self.frames)
        await _wait_for(lambda: len(self.frames) >= start + count, timeout_s, what)
        return self.frames[start:]


@pytest.fixture
async def stopper() -> AsyncIterator[list[CameraSource]]:
    """Sources appended here are stopped at the end of the test, whatever happens."""
    sources: list[CameraSource] = []
    yield sources
    for source in sources:
        await source.astop()


def _assert_no_thread_failure(caplog: pytest.LogCaptureFixture) -> None:
    failures = [r.getMessage() for r in caplog.records if "decode thread failed" in r.getMessage()]
    assert not failures


# --------------------------------------------------------------------------- files


async def test_file_sampled_at_5_fps_gives_every_third_frame_as_bgr(clip: Path) -> None:
    queue = FrameQueue(4, "wait")
    source = _source(clip, queue)
    source.start()
    frames = await _drain(queue)
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
    source = _source(clip, queue, skip_non_reference=True)
    source.start()
    frames = await _drain(queue)
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
    dense = _source(clip, queue, sample_fps=10, skip_non_reference=True)
    dense.start()
    await _drain(queue)
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
    source = _source(sparse, queue, skip_non_reference=True)
    source.start()
    frames = await _drain(queue)
    await source.astop()
    assert not source.stats.skipping_non_reference
    pts = [f.pts_s for f in frames]
    late = [p for p in pts if p - pts[0] > 2.5]  # after the check: every slot kept
    assert np.allclose(np.diff(late), 0.2, atol=1e-3), np.diff(late)


async def test_bgr_matches_a_plain_pyav_decode(clip: Path) -> None:
    queue = FrameQueue(1, "wait")
    source = _source(clip, queue, sample_fps=1)
    source.start()
    first = await queue.get()
    await source.astop()
    with av.open(str(clip)) as container:
        expected = next(container.decode(video=0)).to_ndarray(format="bgr24")
    assert first is not None and np.array_equal(first.image, expected)


async def test_realtime_paces_by_pts(short_clip: Path) -> None:
    queue = FrameQueue(4, "wait")
    source = _source(short_clip, queue, realtime=True)
    started = time.monotonic()
    source.start()
    frames = await _drain(queue)
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


async def test_loop_file_repeats_with_increasing_index(
    short_clip: Path, stopper: list[CameraSource]
) -> None:
    queue = FrameQueue(4, "wait")
    source = _source(short_clip, queue, loop_file=True)
    stopper.append(source)
    source.start()
    per_pass = len(sample_times(short_clip, 5))
    count = 2 * per_pass + 5
    frames: list[Frame] = []
    async with asyncio.timeout(20):
        while len(frames) < count:
            frame = await queue.get()
            assert frame is not None
            frames.append(frame)
    assert [f.index for f in frames] == list(range(count))
    restarts = [i for i in range(1, count) if frames[i].pts_s < frames[i - 1].pts_s]
    assert restarts == [per_pass, 2 * per_pass]  # the first frame of each pass is kept
    assert frames[per_pass].pts_s == frames[2 * per_pass].pts_s == frames[0].pts_s
    assert source.stats.state == "connected" and source.stats.reconnects == 0
    await source.astop()
    assert source.stats.state == "stopped" and not source.running
    assert queue.closed


def _flip_payload(data: bytes) -> bytes:
    """Invert the payload of 100 TS packets mid-file, keeping their 4-byte headers."""
    out = bytearray(data)
    start = (len(data) // 2) // TS_PACKET * TS_PACKET
    for offset in range(start, start + 100 * TS_PACKET):
        if (offset - start) % TS_PACKET >= 4:
            out[offset] ^= 0xFF
    return bytes(out)


def _flip_sparse(data: bytes) -> bytes:
    """Invert every 7th byte over 20 kB mid-file (sync bytes and headers too)."""
    out = bytearray(data)
    for offset in range(len(data) // 2, len(data) // 2 + 20_000, 7):
        out[offset] ^= 0xFF
    return bytes(out)


def _truncate(data: bytes) -> bytes:
    return data[: len(data) // 2 + 1234]  # mid TS packet, mid video frame


def _append_garbage(data: bytes) -> bytes:
    return data + np.random.default_rng(7).integers(0, 256, 100_000, dtype=np.uint8).tobytes()


def _write_damaged(clip: Path, out: Path, damage: Callable[[bytes], bytes]) -> Path:
    out.write_bytes(damage(clip.read_bytes()))
    return out


@pytest.mark.parametrize(
    ("damage", "expect_errors"),
    [
        (_flip_payload, True),
        (_flip_sparse, True),
        (_truncate, False),
        (_append_garbage, False),
    ],
)
async def test_corrupt_file_still_yields_frames_and_ends(
    clip: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    damage: Callable[[bytes], bytes],
    expect_errors: bool,
) -> None:
    caplog.set_level(logging.DEBUG, logger="streamer.ingest.source")
    damaged = _write_damaged(clip, tmp_path / "damaged.ts", damage)
    queue = FrameQueue(4, "wait")
    source = _source(damaged, queue)
    source.start()
    frames = await _drain(queue)
    await source.astop()
    assert len(frames) >= 10
    assert [f.index for f in frames] == list(range(len(frames)))
    assert source.stats.state == "ended"
    assert source.stats.decoded >= 40
    if expect_errors:
        assert source.stats.decode_errors > 0
    _assert_no_thread_failure(caplog)


async def test_unopenable_file_ends_with_the_error(tmp_path: Path) -> None:
    bogus = tmp_path / "not_a_video.ts"
    bogus.write_bytes(b"\x00" * 10_000)
    for path, error in ((tmp_path / "missing.ts", "FileNotFoundError"), (bogus, "InvalidData")):
        queue = FrameQueue(2, "wait")
        source = _source(path, queue)
        source.start()
        async with asyncio.timeout(5):
            assert await queue.get() is None
        await source.astop()
        assert source.stats.state == "ended", path
        assert error in (source.stats.last_error or ""), source.stats.last_error
        assert source.stats.decoded == 0


async def test_unopenable_file_is_retried_when_looping(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="streamer.ingest.source")
    queue = FrameQueue(2, "wait")
    source = _source(
        tmp_path / "missing.ts",
        queue,
        loop_file=True,
        reconnect_initial_delay_s=0.05,
        reconnect_max_delay_s=0.1,
    )
    source.start()
    await _wait_for(lambda: source.stats.reconnects >= 3, 5, "three retries")
    assert source.stats.state == "reconnecting" and source.running
    assert "FileNotFoundError" in (source.stats.last_error or "")
    await source.astop()
    assert source.stats.state == "stopped" and not source.running
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]  # once per state change


async def test_drop_oldest_counts_drops_in_stats(clip: Path) -> None:
    queue = FrameQueue(1, "drop_oldest")
    source = _source(clip, queue)
    source.start()
    await _wait_for(lambda: source.stats.state == "ended", 20, "end of the clip")
    frames = await _drain(queue)
    await source.astop()
    assert len(frames) == 1 and frames[0].index == source.stats.sampled - 1  # the newest
    assert source.stats.dropped == source.stats.sampled - 1 == queue.dropped


async def test_stop_is_idempotent_and_stops_a_blocked_producer(clip: Path) -> None:
    queue = FrameQueue(1, "wait")  # nobody reads: the decode thread blocks in put
    source = _source(clip, queue, loop_file=True)
    source.start()
    source.start()  # a second start does nothing
    await _wait_for(lambda: queue.qsize() == 1, 5, "the queue to fill")
    started = time.monotonic()
    await asyncio.gather(source.astop(), source.astop())
    source.stop()
    assert time.monotonic() - started < 2
    assert source.stats.state == "stopped" and not source.running
    assert [t.name for t in threading.enumerate() if t.name.startswith("ingest-cam")] == []
    with pytest.raises(RuntimeError, match="stopped"):
        source.start()


# --------------------------------------------------------------------------- RTSP


def _gst_rtsp_available() -> bool:
    check = "import gi; gi.require_version('GstRtspServer', '1.0')"
    try:
        return subprocess.run([SYSTEM_PYTHON, "-c", check], capture_output=True).returncode == 0
    except OSError:
        return False


# Never skipped: `make test` installs GStreamer's RTSP server (Makefile: APT_PACKAGES).
needs_rtsp = pytest.mark.usefixtures("gst_rtsp_installed")


@pytest.fixture(scope="session")
def gst_rtsp_installed() -> None:
    assert _gst_rtsp_available(), (
        "GStreamer's RTSP server is missing: run `make setup` (python3-gi, "
        "gir1.2-gst-rtsp-server-1.0, gstreamer1.0-plugins-bad)"
    )


@pytest.fixture
def rtsp(clip: Path) -> Iterator[RtspServer]:
    with RtspServer(clip) as server:
        yield server


def _live(url: str, queue: FrameQueue, **kwargs: object) -> CameraSource:
    options: dict = {
        "open_timeout_s": 2.0,
        "read_timeout_s": 1.0,
        "stall_timeout_s": 3.0,
        "reconnect_initial_delay_s": 0.2,
        "reconnect_max_delay_s": 1.0,
    }
    options.update(kwargs)
    return _source(url, queue, **options)


@needs_rtsp
async def test_rtsp_frames_arrive(rtsp: RtspServer, stopper: list[CameraSource]) -> None:
    queue = FrameQueue(2, "drop_oldest")
    source = _live(rtsp.url("/cam"), queue)
    stopper.append(source)
    source.start()
    collector = _Collector(queue)
    frames = await collector.more(8, 10, "8 frames over RTSP")
    assert source.live and source.stats.state == "connected"
    assert frames[0].image.shape == (1080, 1920, 3)
    assert [f.index for f in frames[:8]] == list(range(8))
    # The first frame of a session may lack a pts; after it, 15 fps sampled at 5 and paced
    # in real time by the server: 0.2 s of stream time and of wall time apart.
    assert np.allclose(np.diff([f.pts_s for f in frames[1:8]]), 0.2, atol=1e-3)
    assert 0.6 < frames[7].monotonic - frames[2].monotonic < 1.6
    assert 8 < source.stats.fps < 25, source.stats.fps
    assert source.stats.decoded >= 2 + 3 * 6 and source.stats.decode_errors == 0
    await source.astop()
    assert source.stats.state == "stopped"
    await asyncio.wait_for(collector.task, 2)  # the queue was closed


@needs_rtsp
async def test_rtsp_server_killed_then_restarted(
    rtsp: RtspServer, stopper: list[CameraSource]
) -> None:
    queue = FrameQueue(2, "drop_oldest")
    source = _live(rtsp.url("/cam"), queue)
    stopper.append(source)
    source.start()
    collector = _Collector(queue)
    await collector.more(3, 10, "frames before the kill")

    rtsp.kill()
    await _wait_for(lambda: source.stats.state == "reconnecting", 3, "the loss noticed")
    await _wait_for(lambda: source.stats.reconnects >= 2, 5, "refused reconnects")
    assert "ConnectionRefused" in (source.stats.last_error or "")
    assert source.running

    before = len(collector.frames)
    rtsp.start()  # same port
    resumed = await collector.more(3, 10, "frames after the restart")
    assert source.stats.state == "connected" and source.running
    indices = [f.index for f in collector.frames]
    assert indices == sorted(set(indices)) and resumed[0].index >= before


@needs_rtsp
async def test_rtsp_frozen_server_detected_then_reconnected(
    rtsp: RtspServer, stopper: list[CameraSource]
) -> None:
    queue = FrameQueue(2, "drop_oldest")
    source = _live(rtsp.url("/cam"), queue, read_timeout_s=1.0, stall_timeout_s=3.0)
    stopper.append(source)
    source.start()
    collector = _Collector(queue)
    await collector.more(3, 10, "frames before the freeze")

    rtsp.freeze()
    detected = await _wait_for(
        lambda: source.stats.state == "reconnecting", 5, "the frozen server noticed"
    )
    assert detected <= 3.0, detected  # about twice the read timeout
    assert source.stats.last_error
    await asyncio.sleep(0.5)
    rtsp.thaw()
    await collector.more(3, 10, "frames after the thaw")
    assert source.stats.state == "connected" and source.running
    assert source.stats.reconnects >= 1


@needs_rtsp
async def test_watchdog_replaces_a_decode_thread_stuck_in_ffmpeg(
    rtsp: RtspServer, stopper: list[CameraSource]
) -> None:
    # FFmpeg's read timeout far beyond the stall timeout: only the watchdog can act.
    queue = FrameQueue(2, "drop_oldest")
    source = _live(rtsp.url("/cam"), queue, read_timeout_s=30.0, stall_timeout_s=1.0)
    stopper.append(source)
    source.start()
    collector = _Collector(queue)
    await collector.more(3, 10, "frames before the freeze")

    rtsp.freeze()
    detected = await _wait_for(
        lambda: source.stats.state == "reconnecting", 4, "the stall noticed by the watchdog"
    )
    assert detected <= 2.5, detected
    assert "no frame decoded" in (source.stats.last_error or "")
    await _wait_for(
        lambda: any(t.name == "ingest-cam-1" for t in threading.enumerate()),
        4,
        "a replacement decode thread",
    )
    rtsp.kill()  # the frozen server's connections drop; the stuck read returns
    rtsp.start()
    await collector.more(3, 15, "frames from the replacement thread")
    assert source.stats.state == "connected" and source.running
    indices = [f.index for f in collector.frames]
    assert indices == sorted(set(indices))
    await _wait_for(
        lambda: not any(t.name == "ingest-cam" for t in threading.enumerate()),
        5,
        "the abandoned thread to exit",
    )


@needs_rtsp
async def test_rtsp_password_never_logged(
    rtsp: RtspServer, stopper: list[CameraSource], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="streamer.ingest.source")
    queue = FrameQueue(2, "drop_oldest")
    source = _live(rtsp.url("/cam", userinfo="user:secret@"), queue)
    stopper.append(source)
    assert "secret" not in repr(source) and "secret" not in source.redacted_url
    source.start()
    collector = _Collector(queue)
    await collector.more(2, 10, "frames with credentials in the URL")
    rtsp.kill()
    await _wait_for(lambda: source.stats.reconnects >= 2, 5, "refused reconnects")
    await source.astop()

    last_error = source.stats.last_error or ""
    assert "ConnectionRefused" in last_error and "***" in last_error
    assert "secret" not in last_error
    messages = [r.getMessage() for r in caplog.records]
    assert any("lost rtsp://***:***@" in m for m in messages), messages
    assert "secret" not in caplog.text
    assert all("secret" not in m for m in messages)
