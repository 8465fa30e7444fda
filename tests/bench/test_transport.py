"""bench/transport.py: the request sizes it reports are the product's own requests, and the
suite's T row it makes."""

from __future__ import annotations

import time
from typing import Any

import av

from bench.transport import figure, request_bytes
from streamer.domain.frames import Frame
from tests.footage import YARD_CLIP


def test_a_yuv_request_is_half_a_bgr_one() -> None:
    with av.open(str(YARD_CLIP)) as container:
        picture = next(iter(container.decode(video=0)))
    sizes = {}
    for i420 in (False, True):
        frame = Frame("cam", 0, 0.0, time.time(), time.monotonic(), picture)
        sizes[i420] = request_bytes(frame, i420)
    pixels = picture.width * picture.height
    assert pixels * 3 <= sizes[False] < pixels * 3 + 4096  # the BGR bytes and a small header
    assert pixels * 3 // 2 <= sizes[True] < pixels * 3 // 2 + 4096


def _result(same: int) -> dict[str, Any]:
    def path(seconds: list[float], request_bytes: int) -> dict[str, Any]:
        return {
            "seconds": seconds,
            "request_bytes": request_bytes,
            "streamer_writes": ["a", "b", "c"],
            "self_cpu_ms_per_frame": 10.0,
            "triton_cpu_ms_per_frame": 100.0,
        }

    return {
        "paths": {"bgr": path([6.0, 6.2, 5.8], 6_220_000), "yuv": path([5.0, 5.2, 5.1], 3_110_000)},
        "frames": 60,
        "cameras": 4,
        "frames_with_the_same_texts": same,
    }


def test_the_t_row_is_yuv_over_bgr_per_round_and_needs_the_same_texts() -> None:
    row = figure(_result(60), "python -m bench.transport")
    assert row.key == "T" and row.a == [12.0, 60 / 5.2, 60 / 5.1] and row.b[0] == 10.0
    assert row.ratio is not None and row.ratio > 1.1 and row.verdict == "PASS"
    assert any("3.11 MB" in note for note in row.notes)
    differing = figure(_result(58), "python -m bench.transport")
    assert differing.ratio == row.ratio and differing.verdict == "MISS"
    assert differing.failed_checks == ["texts differ on 2 of 60 frames"]
