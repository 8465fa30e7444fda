"""Fixtures of the CameraSource tests: the footage, a real GStreamer RTSP server, cleanup."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import av
import pytest

from converters import assets
from streamer.ingest.source import CameraSource
from tests.rtsp_server import SYSTEM_PYTHON, RtspServer


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


@pytest.fixture
async def stopper() -> AsyncIterator[list[CameraSource]]:
    """Sources appended here are stopped at the end of the test, whatever happens."""
    sources: list[CameraSource] = []
    yield sources
    for source in sources:
        await source.astop()


def _gst_rtsp_available() -> bool:
    check = "import gi; gi.require_version('GstRtspServer', '1.0')"
    try:
        return subprocess.run([SYSTEM_PYTHON, "-c", check], capture_output=True).returncode == 0
    except OSError:
        return False


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
