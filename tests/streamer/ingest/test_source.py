"""streamer.ingest.source (lifecycle, reconnects, state) on real footage and a real
GStreamer RTSP server: no mocks.

The RTSP half needs Debian's ``python3-gi`` and ``gir1.2-gst-rtsp-server-1.0`` (see
tests/rtsp_server.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from streamer.domain.frames import Frame
from streamer.ingest.frame_queue import FrameQueue
from streamer.ingest.source import CameraSource
from tests.footage import sample_times
from tests.rtsp_server import RtspServer
from tests.streamer.ingest.sources import (
    Collector,
    drain,
    make_live,
    make_source,
    needs_rtsp,
    wait_for,
)

# --------------------------------------------------------------------------- files


async def test_loop_file_repeats_with_increasing_index(
    short_clip: Path, stopper: list[CameraSource]
) -> None:
    queue = FrameQueue(4, "wait")
    source = make_source(short_clip, queue, loop_file=True)
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


async def test_unopenable_file_ends_with_the_error(tmp_path: Path) -> None:
    bogus = tmp_path / "not_a_video.ts"
    bogus.write_bytes(b"\x00" * 10_000)
    for path, error in ((tmp_path / "missing.ts", "FileNotFoundError"), (bogus, "InvalidData")):
        queue = FrameQueue(2, "wait")
        source = make_source(path, queue)
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
    source = make_source(
        tmp_path / "missing.ts",
        queue,
        loop_file=True,
        reconnect_initial_delay_s=0.05,
        reconnect_max_delay_s=0.1,
    )
    source.start()
    await wait_for(lambda: source.stats.reconnects >= 3, 5, "three retries")
    assert source.stats.state == "reconnecting" and source.running
    assert "FileNotFoundError" in (source.stats.last_error or "")
    await source.astop()
    assert source.stats.state == "stopped" and not source.running
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]  # once per state change


def test_the_reconnect_delay_stays_bounded_after_thousands_of_failures(tmp_path: Path) -> None:
    # A camera down for a day fails thousands of times; 2.0**1024 would overflow.
    source = make_source(tmp_path / "missing.ts", FrameQueue(2, "wait"), loop_file=True)
    delays = [source._backoff(attempt) for attempt in (0, 10, 1_023, 1_024, 100_000)]
    assert all(0 < d <= source.reconnect_max_delay_s for d in delays), delays
    assert source._backoff(0) <= source.reconnect_initial_delay_s


async def test_drop_oldest_counts_drops_in_stats(clip: Path) -> None:
    queue = FrameQueue(1, "drop_oldest")
    source = make_source(clip, queue)
    source.start()
    await wait_for(lambda: source.stats.state == "ended", 20, "end of the clip")
    frames = await drain(queue)
    await source.astop()
    assert len(frames) == 1 and frames[0].index == source.stats.sampled - 1  # the newest
    assert source.stats.dropped == source.stats.sampled - 1 == queue.dropped


async def test_stop_is_idempotent_and_stops_a_blocked_producer(clip: Path) -> None:
    queue = FrameQueue(1, "wait")  # nobody reads: the decode thread blocks in put
    source = make_source(clip, queue, loop_file=True)
    source.start()
    source.start()  # a second start does nothing
    await wait_for(lambda: queue.qsize() == 1, 5, "the queue to fill")
    started = time.monotonic()
    await asyncio.gather(source.astop(), source.astop())
    source.stop()
    assert time.monotonic() - started < 2
    assert source.stats.state == "stopped" and not source.running
    assert [t.name for t in threading.enumerate() if t.name.startswith("ingest-cam")] == []
    with pytest.raises(RuntimeError, match="stopped"):
        source.start()


# --------------------------------------------------------------------------- RTSP


@needs_rtsp
async def test_rtsp_frames_arrive(rtsp: RtspServer, stopper: list[CameraSource]) -> None:
    queue = FrameQueue(2, "drop_oldest")
    source = make_live(rtsp.url("/cam"), queue)
    stopper.append(source)
    source.start()
    collector = Collector(queue)
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
    source = make_live(rtsp.url("/cam"), queue)
    stopper.append(source)
    source.start()
    collector = Collector(queue)
    await collector.more(3, 10, "frames before the kill")

    rtsp.kill()
    await wait_for(lambda: source.stats.state == "reconnecting", 3, "the loss noticed")
    await wait_for(lambda: source.stats.reconnects >= 2, 5, "refused reconnects")
    assert "ConnectionRefused" in (source.stats.last_error or "")
    assert source.running

    before = len(collector.frames)
    rtsp.start()  # same port
    resumed = await collector.more(3, 10, "frames after the restart")
    assert source.stats.state == "connected" and source.running
    indices = [f.index for f in collector.frames]
    assert indices == sorted(set(indices)) and resumed[0].index >= before


@needs_rtsp
async def test_rtsp_password_never_logged(
    rtsp: RtspServer, stopper: list[CameraSource], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="streamer.ingest")
    queue = FrameQueue(2, "drop_oldest")
    source = make_live(rtsp.url("/cam", userinfo="user:secret@"), queue)
    stopper.append(source)
    assert "secret" not in repr(source) and "secret" not in source.redacted_url
    source.start()
    collector = Collector(queue)
    await collector.more(2, 10, "frames with credentials in the URL")
    rtsp.kill()
    await wait_for(lambda: source.stats.reconnects >= 2, 5, "refused reconnects")
    await source.astop()

    last_error = source.stats.last_error or ""
    assert "ConnectionRefused" in last_error and "***" in last_error
    assert "secret" not in last_error
    messages = [r.getMessage() for r in caplog.records]
    assert any("lost rtsp://***:***@" in m for m in messages), messages
    assert "secret" not in caplog.text
    assert all("secret" not in m for m in messages)
