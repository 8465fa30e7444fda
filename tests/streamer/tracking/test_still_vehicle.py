"""A vehicle that stops: the yard clip with one frame held, through the service and real Triton.

Each variant holds one frame of ``yard_cam.ts`` (ffmpeg's ``loop`` filter, re-encoded
with libx264), as a car waiting at a barrier: frame 9, which the recogniser misreads
``C567AM76`` every time it is held (the black car's plate is ``O567AM76``), for 8 s (40
reads of it); frame 17, in the middle of the silver car's pass; the clip's last frame.
(bench/accuracy.py holds more frames, for longer.) Whatever the still image reads, and
however long it stands, the service reports exactly the clip's two plates, and no
correction ends on another text.

Motion gating is off: the gate would skip most still frames here, but a real camera's
noise lets a waiting car's frames through, and the evidence rule must hold alone.
Before it (every read a vote), the misread variant reported ``C567AM76``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from streamer.app import Service
from streamer.config import load_config
from streamer.inference.embedded.server import EmbeddedTriton
from tests.footage import YARD_CLIP, YARD_FPS, encode_yard

CLIP = YARD_CLIP
FPS = YARD_FPS
PLATES = ["O567AM76", "Y836XH76"]
#: name -> (frame held, seconds).
VARIANTS = {
    "misread-8s": (9, 8.0),
    "silver-middle-4s": (17, 4.0),
    "end-5s": (119, 5.0),
}

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs Debian's ffmpeg")


def _held(out: Path, frame: int, seconds: float) -> Path:
    """``CLIP`` with ``frame`` repeated for ``seconds``, re-encoded (libx264, mpegts)."""
    graph = f"[0:v]loop=loop={round(seconds * FPS)}:size=1:start={frame},setpts=N/{FPS}/TB[out]"
    return encode_yard(out, graph)


async def _events(tmp_path: Path, clip: Path, triton: EmbeddedTriton) -> list[dict]:
    events_file = tmp_path / "events.jsonl"
    config = tmp_path / "still.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{clip}', sample_fps: 5, realtime: false,"
        " motion: {enabled: false}}\n"
        # One frame at a time: the same frames give the same reads, run after run.
        f"triton: {{url: '{triton.grpc_url}', max_in_flight_per_camera: 1}}\n"
        f"events: {{stdout: false, file: '{events_file}'}}\n"
        "metrics: {enabled: false}\nweb: {enabled: false}\n"
    )
    service = Service(load_config(config), once=True)
    assert await asyncio.wait_for(service.run(), 600) == 0
    return [json.loads(line) for line in events_file.read_text().splitlines()]


def _final_texts(events: list[dict]) -> list[str]:
    """Each pass's text at its highest version."""
    latest: dict[str, dict] = {}
    for event in events:
        if event["version"] > latest.get(event["event_id"], {"version": 0})["version"]:
            latest[event["event_id"]] = event
    return sorted(e["text"] for e in latest.values())


@pytest.mark.parametrize("name", list(VARIANTS))
async def test_a_held_frame_gives_exactly_the_two_plates(
    name: str, tmp_path: Path, triton_server: EmbeddedTriton
) -> None:
    frame, seconds = VARIANTS[name]
    clip = _held(tmp_path / f"{name}.ts", frame, seconds)
    events = await _events(tmp_path, clip, triton_server)
    assert _final_texts(events) == PLATES, events
    # Decided right the first time: no correction was needed.
    assert sorted(e["text"] for e in events if e["version"] == 1) == PLATES, events
    for event in events:
        assert event["evidence"] >= 1 and event["reads"] >= event["evidence"]
