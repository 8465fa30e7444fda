"""bench/transport.py: the request sizes it reports are the product's own requests."""

from __future__ import annotations

import time

import av

from bench.transport import request_bytes
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
