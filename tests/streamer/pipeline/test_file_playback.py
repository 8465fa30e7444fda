"""A file played as fast as possible (``realtime: false``) gives the same events on a fast and
a slow machine: the real service on a real CPU Triton, answering at its pace and paused most
of the time (SIGSTOP / SIGCONT on the server and its model stubs, so it answers several times
slower)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from streamer.app import Service
from streamer.config import load_config
from tests.conftest import SpareTriton
from tests.footage import YARD_CLIP, YARD_FPS, encode_yard

CLIP = YARD_CLIP
FPS = YARD_FPS
#: x264 as tests/streamer/tracking/test_still_vehicle.py encodes held frames.
#: The paused Triton runs ``RUN_S`` in every ``RUN_S + PAUSE_S``: ten times slower at most.
RUN_S, PAUSE_S = 0.03, 0.27

needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs Debian's ffmpeg")


@pytest.fixture(scope="module")
def pass_then_still(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The clip's first 3 s (the silver car manoeuvres, the black car parked), then its frame
    45 held 3 s: a still scene with a parked car in view, as at a barrier."""
    graph = f"[0:v]loop=loop={3 * FPS}:size=1:start=45,trim=end_frame={46 + 3 * FPS}"
    graph += f",setpts=N/{FPS}/TB[out]"
    return encode_yard(tmp_path_factory.mktemp("playback") / "pass_then_still.ts", graph)


@pytest.fixture(scope="module")
def still_car(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The clip's frame 48 held 4 s: the black car stands still, nothing moves."""
    graph = f"[0:v]trim=start_frame=48:end_frame=49,loop=loop={4 * FPS - 1}:size=1:start=0"
    graph += f",setpts=N/{FPS}/TB[out]"
    return encode_yard(tmp_path_factory.mktemp("playback") / "still_car.ts", graph)


def _processes(pid: int) -> list[int]:
    """``pid`` and its children (the Python-backend stubs)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return [pid, *(int(c) for c in children)]


async def _pause_often(pid: int) -> None:
    """Until cancelled: the server and its stubs stopped ``PAUSE_S``, let run ``RUN_S``."""
    pids = _processes(pid)
    try:
        while True:
            for p in pids:
                os.kill(p, signal.SIGSTOP)
            await asyncio.sleep(PAUSE_S)
            for p in pids:
                os.kill(p, signal.SIGCONT)
            await asyncio.sleep(RUN_S)
    finally:
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGCONT)


async def _play(tmp_path: Path, clip: Path, url: str, name: str) -> tuple[list[dict], Service]:
    events_file = tmp_path / f"{name}.jsonl"
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        "cameras:\n"
        f"  - name: yard\n    url: '{clip}'\n    sample_fps: 5\n    realtime: false\n"
        f"triton: {{url: '{url}', request_timeout_s: 60}}\n"
        f"events: {{stdout: false, file: '{events_file}'}}\n"
        "metrics: {enabled: false}\nweb: {enabled: false}\n"
    )
    service = Service(load_config(config), once=True)
    assert await asyncio.wait_for(service.run(), 600) == 0
    return [json.loads(line) for line in events_file.read_text().splitlines()], service


def _latency(service: Service) -> str:
    """The mean time a frame waited for its answer (the inference latency histogram)."""
    registry, labels = service.metrics.registry, {"camera": "yard"}
    total = registry.get_sample_value("lpr_inference_latency_seconds_sum", labels) or 0.0
    count = registry.get_sample_value("lpr_inference_latency_seconds_count", labels) or 1.0
    return f"answers in {total / count:.2f} s on average"


def _summary(events: list[dict]) -> list[tuple]:
    return sorted(
        (e["text"], e["version"], e["reads"], e["first_seen"]["stream_time_s"]) for e in events
    )


@needs_ffmpeg
async def test_a_file_gives_the_same_events_when_triton_answers_slowly(
    tmp_path: Path, pass_then_still: Path, spare_triton: SpareTriton
) -> None:
    server = await spare_triton.running()
    assert server.pid is not None
    started = time.monotonic()
    fast, fast_service = await _play(tmp_path, pass_then_still, server.grpc_url, "fast")
    fast_s = time.monotonic() - started
    pauser = asyncio.create_task(_pause_often(server.pid))
    started = time.monotonic()
    try:
        slow, slow_service = await _play(tmp_path, pass_then_still, server.grpc_url, "slow")
    finally:
        pauser.cancel()
        await asyncio.gather(pauser, return_exceptions=True)
    slow_s = time.monotonic() - started
    fast_stats = fast_service.cameras["yard"].pipeline.stats
    slow_stats = slow_service.cameras["yard"].pipeline.stats
    print(
        f"fast: {fast_s:.1f} s, {fast_stats.sent} frames sent, {_latency(fast_service)};"
        f" slow: {slow_s:.1f} s, {slow_stats.sent} sent, {_latency(slow_service)};"
        f" events {_summary(fast)}"
    )
    assert {e["text"] for e in fast} == {"O567AM76", "Y836XH76"}
    assert _summary(slow) == _summary(fast)
    assert (slow_stats.sent, slow_stats.failed) == (fast_stats.sent, 0)
    skipped = slow_service.cameras["yard"].source.stats.skipped_no_motion
    assert skipped == fast_service.cameras["yard"].source.stats.skipped_no_motion > 0


@needs_ffmpeg
async def test_a_still_car_in_a_file_is_reread_and_reported(
    tmp_path: Path, still_car: Path, triton_server
) -> None:
    # Nothing moves: the gate sends the first frame, and once its answer has made a track,
    # one frame per stationary interval (1 s) while the track lives: 0, 1, 2 and 3 s.
    events, service = await _play(tmp_path, still_car, triton_server.grpc_url, "still")
    stats = service.cameras["yard"].pipeline.stats
    assert stats.sent == 4, stats
    assert [(e["text"], e["evidence"]) for e in events] == [("O567AM76", 1)]


@pytest.fixture(scope="module")
def plate_at_the_end(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The clip's last 4 s (the black car parked, the silver car gone) with the black car's
    plate painted over but in the last 6 frames: at sample_fps 5, the last 2 sampled."""
    graph = (
        "[0:v]trim=start_frame=60,setpts=N/15/TB,"
        "drawbox=x=1490:y=315:w=120:h=75:color=black@1:t=fill:enable='lt(n,54)'[out]"
    )
    return encode_yard(tmp_path_factory.mktemp("playback") / "plate_at_the_end.ts", graph)


@needs_ffmpeg
async def test_a_plate_read_in_the_last_two_frames_is_reported_at_the_end(
    tmp_path: Path, plate_at_the_end: Path, triton_server
) -> None:
    events_file = tmp_path / "end.jsonl"
    config = tmp_path / "end.yaml"
    config.write_text(
        "cameras:\n"
        f"  - name: yard\n    url: '{plate_at_the_end}'\n    sample_fps: 5\n"
        "    realtime: false\n    motion: {enabled: false}\n"
        f"triton: {{url: '{triton_server.grpc_url}'}}\n"
        f"events: {{stdout: false, file: '{events_file}'}}\n"
        "metrics: {enabled: false}\nweb: {enabled: false}\n"
    )
    reads: list[tuple[float, list[str]]] = []
    service = Service(
        load_config(config),
        once=True,
        on_result=lambda r: reads.append((r.frame.pts_s, [p.text for p in r.plates])),
    )
    assert await asyncio.wait_for(service.run(), 600) == 0
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    # The recogniser read the plate in the last two frames sent, and only there.
    read_at = [i for i, (_, texts) in enumerate(reads) if "O567AM76" in texts]
    assert read_at == [len(reads) - 2, len(reads) - 1], reads
    assert [(e["text"], e["reason"], e["reads"]) for e in events] == [("O567AM76", "flush", 2)]
    assert 0.5 <= events[0]["confidence"] <= 1.0
