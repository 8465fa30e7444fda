"""streamer.ingest.watchdog: the stall verdicts on given times, then a decode thread stuck
inside FFmpeg replaced by the real watchdog against a real GStreamer RTSP server."""

from __future__ import annotations

import threading

from streamer.ingest.frame_queue import FrameQueue
from streamer.ingest.source import CameraSource
from streamer.ingest.watchdog import Stall, StallDetector
from tests.rtsp_server import RtspServer
from tests.streamer.ingest.sources import Collector, make_live, needs_rtsp, wait_for


def test_a_stall_is_flagged_then_the_thread_abandoned_each_once() -> None:
    detector = StallDetector(3.0, now=100.0)
    assert detector.check(103.0, connected=True, stopping=False) is None  # not past 3 s
    assert detector.check(104.0, connected=False, stopping=False) is None  # not connected
    with detector.waiting():  # waiting on the queue or pacing is not a stall
        assert detector.check(104.0, connected=True, stopping=False) is None
    assert detector.check(104.0, connected=True, stopping=False) == Stall("reconnect", 4.0)
    assert detector.stalled
    assert detector.check(106.0, connected=False, stopping=False) is None  # 2 s after the flag
    assert detector.check(107.5, connected=False, stopping=True) is None  # stopping: no new thread
    assert detector.check(107.5, connected=False, stopping=False) == Stall("abandon", 7.5)
    assert not detector.stalled
    assert detector.check(108.0, connected=False, stopping=False) is None


def test_an_acknowledged_stall_needs_a_new_timeout_of_no_progress() -> None:
    detector = StallDetector(1.0, now=0.0)
    detector.progress(5.0)
    assert detector.check(5.5, connected=True, stopping=False) is None
    assert detector.check(6.5, connected=True, stopping=False) == Stall("reconnect", 1.5)
    detector.acknowledge()  # the decode loop ended the session
    detector.reset(7.0)  # and reconnected
    assert not detector.stalled
    assert detector.check(7.9, connected=True, stopping=False) is None
    assert detector.check(8.5, connected=True, stopping=False) == Stall("reconnect", 1.5)


# --------------------------------------------------------------------------- RTSP


@needs_rtsp
async def test_watchdog_replaces_a_decode_thread_stuck_in_ffmpeg(
    rtsp: RtspServer, stopper: list[CameraSource]
) -> None:
    # FFmpeg's read timeout far beyond the stall timeout: only the watchdog can act.
    queue = FrameQueue(2, "drop_oldest")
    source = make_live(rtsp.url("/cam"), queue, read_timeout_s=30.0, stall_timeout_s=1.0)
    stopper.append(source)
    source.start()
    collector = Collector(queue)
    await collector.more(3, 10, "frames before the freeze")

    rtsp.freeze()
    detected = await wait_for(
        lambda: source.stats.state == "reconnecting", 4, "the stall noticed by the watchdog"
    )
    assert detected <= 2.5, detected
    assert "no frame decoded" in (source.stats.last_error or "")
    await wait_for(
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
    await wait_for(
        lambda: not any(t.name == "ingest-cam" for t in threading.enumerate()),
        5,
        "the abandoned thread to exit",
    )
