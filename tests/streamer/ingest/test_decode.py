"""streamer.ingest.decode: the options per scheme, then PyAV decoding through a CameraSource
on real (and damaged) footage and a real GStreamer RTSP server: no mocks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest
from av.codec.context import ThreadType

from streamer.ingest.decode import OpenTimeoutError, is_live, open_options, open_video
from streamer.ingest.frame_queue import FrameQueue
from streamer.ingest.source import CameraSource
from tests.footage import YARD_CLIP
from tests.rtsp_server import RtspServer
from tests.streamer.ingest.sources import (
    Collector,
    assert_no_thread_failure,
    drain,
    make_live,
    make_source,
    needs_rtsp,
    wait_for,
)

TS_PACKET = 188


def test_live_urls_get_the_transport_quick_probing_and_a_socket_timeout_in_us() -> None:
    rtsp = open_options("rtsp://u:p@10.0.0.5/s", rtsp_transport="udp", read_timeout_s=2.5)
    assert rtsp == {
        "rtsp_transport": "udp",
        "analyzeduration": "0",
        "probesize": "32",
        "timeout": "2500000",
    }
    assert open_options("https://cam/x.m3u8", rtsp_transport="tcp", read_timeout_s=1) == {
        "timeout": "1000000"
    }
    # RTMP reads option timeout as a listen timeout (s), RTP not at all: none is set.
    for url in ("rtmp://cam/live", "rtp://239.0.0.1:5004"):
        assert open_options(url, rtsp_transport="tcp", read_timeout_s=1) == {}, url
    assert [is_live(u) for u in ("RTSP://cam/s", "srt://cam:9000", "/clips/a.ts", "a.mp4")] == [
        True,
        True,
        False,
        False,
    ]


# --------------------------------------------------------------------------- files


async def test_bgr_matches_a_plain_pyav_decode(clip: Path) -> None:
    queue = FrameQueue(1, "wait")
    source = make_source(clip, queue, sample_fps=1)
    source.start()
    first = await queue.get()
    await source.astop()
    with av.open(str(clip)) as container:
        expected = next(container.decode(video=0)).to_ndarray(format="bgr24")
    assert first is not None and np.array_equal(first.image, expected)


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
    caplog.set_level(logging.DEBUG, logger="streamer.ingest")
    damaged = _write_damaged(clip, tmp_path / "damaged.ts", damage)
    queue = FrameQueue(4, "wait")
    source = make_source(damaged, queue)
    source.start()
    frames = await drain(queue)
    await source.astop()
    assert len(frames) >= 10
    assert [f.index for f in frames] == list(range(len(frames)))
    assert source.stats.state == "ended"
    assert source.stats.decoded >= 40
    if expect_errors:
        assert source.stats.decode_errors > 0
    assert_no_thread_failure(caplog)


# --------------------------------------------------------------------------- RTSP


@needs_rtsp
async def test_rtsp_frozen_server_detected_then_reconnected(
    rtsp: RtspServer, stopper: list[CameraSource]
) -> None:
    queue = FrameQueue(2, "drop_oldest")
    source = make_live(rtsp.url("/cam"), queue, read_timeout_s=1.0, stall_timeout_s=3.0)
    stopper.append(source)
    source.start()
    collector = Collector(queue)
    await collector.more(3, 10, "frames before the freeze")

    rtsp.freeze()
    detected = await wait_for(
        lambda: source.stats.state == "reconnecting", 5, "the frozen server noticed"
    )
    assert detected <= 3.0, detected  # about twice the read timeout
    assert source.stats.last_error
    await asyncio.sleep(0.5)
    rtsp.thaw()
    await collector.more(3, 10, "frames after the thaw")
    assert source.stats.state == "connected" and source.running
    assert source.stats.reconnects >= 1


class _SilentServer:
    """A TCP server that accepts connections and answers each with ``reply`` and hangs up
    (no reply: it never answers, and holds them open)."""

    def __init__(self, reply: bytes = b"") -> None:
        self.reply = reply
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(8)
        self.port = self._socket.getsockname()[1]
        self._held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = self._socket.accept()
                self._held.append(connection)
                if self.reply:
                    connection.recv(4096)
                    connection.sendall(self.reply)
                    connection.close()

    def close(self) -> None:
        for connection in [*self._held, self._socket]:
            connection.close()


@pytest.mark.parametrize("scheme", ["rtsp", "http"])
def test_a_server_that_never_answers_is_a_timeout(scheme: str) -> None:
    server = _SilentServer()
    try:
        with pytest.raises(OpenTimeoutError, match=r"no answer within 0.5 s \(open_timeout_s\)"):
            open_video(
                f"{scheme}://127.0.0.1:{server.port}/live",
                live=True,
                rtsp_transport="tcp",
                open_timeout_s=0.5,
                read_timeout_s=0.5,
            )
    finally:
        server.close()


def test_a_server_that_answers_nonsense_and_hangs_up_is_not_a_timeout() -> None:
    server = _SilentServer(reply=b"HELLO\r\n\r\n")
    try:
        with pytest.raises(av.error.FFmpegError) as failure:
            open_video(
                f"rtsp://127.0.0.1:{server.port}/live",
                live=True,
                rtsp_transport="tcp",
                open_timeout_s=5.0,
                read_timeout_s=5.0,
            )
        assert not isinstance(failure.value, OpenTimeoutError)
    finally:
        server.close()


@pytest.mark.parametrize(
    ("url", "realtime", "threads"),
    [(YARD_CLIP, False, True), (YARD_CLIP, True, False), ("rtsp://127.0.0.1:9/x", False, False)],
)
def test_only_a_file_played_as_fast_as_possible_decodes_with_frame_threads(
    url: Path | str, realtime: bool, threads: bool
) -> None:
    """Frame threads for throughput; a camera, or a file paced as one, decodes without them:
    no frame-thread delay, and no pictures of their own per thread."""
    source = make_source(url, FrameQueue(2, "wait"), realtime=realtime)
    assert source.frame_threads == threads
    for frame_threads in (False, True):
        container, stream = open_video(
            str(YARD_CLIP),
            live=False,
            rtsp_transport="tcp",
            open_timeout_s=5.0,
            read_timeout_s=5.0,
            frame_threads=frame_threads,
        )
        with container:
            assert bool(stream.codec_context.thread_type & ThreadType.FRAME) == frame_threads
