"""Erasure on the running service, on real parts (the clip in real time, a real CPU Triton,
Mosquitto with persistence, the SQLite history and event log): a plate erased while its pass
is still open, and a plate erased after its event while the broker is down. Afterwards
neither plate is in any table or picture, the broker's retained ``last`` is cleared (by the
next service on that log: the erasure is durable), and the open pass is never published."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from converters import assets
from streamer.app import Service
from streamer.config import load_config
from streamer.inference.embedded.server import EmbeddedTriton
from tests.mqtt_broker import Broker, retained

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
OPEN, PUBLISHED = "O567AM76", "Y836XH76"  # the parked car, decided late; the car driving off


def _config(triton_url: str, clip: Path, port: int) -> str:
    return (
        f"cameras:\n  - {{name: yard, url: '{clip}', sample_fps: 5, realtime: true}}\n"
        f"triton: {{url: '{triton_url}'}}\n"
        # The parked car is decided only when the clip ends: its pass stays open meanwhile.
        "events: {stdout: false, max_delay_s: 30}\n"
        "metrics: {enabled: false}\nweb: {enabled: false}\n"
        f"mqtt: {{host: 127.0.0.1, port: {port}, client_id: lpr-erasure-test,\n"
        "       topic_prefix: lpr, retry_initial_delay_s: 0.2, retry_max_delay_s: 1.0}\n"
    )


def _holds(folder: Path, text: str) -> list[str]:
    """The files of ``folder`` (SQLite files, their WALs) that hold ``text`` anywhere."""
    return [p.name for p in folder.iterdir() if p.is_file() and text.encode() in p.read_bytes()]


async def _until(condition: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def _last(broker: Broker) -> dict[str, object] | None:
    """The event the broker retains as ``lpr/yard/last`` (None: nothing)."""
    held = (await asyncio.to_thread(retained, broker, "lpr/yard/#")).get("lpr/yard/last")
    return json.loads(held) if held else None


async def test_an_open_pass_and_a_retained_plate_are_erased_for_good(
    triton_server: EmbeddedTriton, tmp_path: Path
) -> None:
    with Broker(tmp_path / "broker", persistence=True) as broker:
        broker.start()
        path = tmp_path / "site.yaml"
        path.write_text(_config(triton_server.grpc_url, CLIP, broker.port))
        service = Service(load_config(path), once=True)
        run = asyncio.create_task(service.run())
        try:

            def texts() -> set[str]:
                return {e.text for e in service.recent.latest()}

            async def published() -> bool:
                return PUBLISHED in texts()

            async def held_last() -> bool:
                return ((await _last(broker)) or {}).get("text") == PUBLISHED

            await _until(published, 60, f"{PUBLISHED}'s event")
            await _until(held_last, 20, "the retained last")
            assert OPEN not in texts()  # still open: decided at the end of the clip
            await asyncio.to_thread(broker.stop)
            open_erased = await service.erase(plate=OPEN, trigger="test")
            published_erased = await service.erase(plate=PUBLISHED, trigger="test")
            assert await asyncio.wait_for(run, 60) == 0
        finally:
            if not run.done():
                service.request_stop()
                await asyncio.gather(run, return_exceptions=True)
        assert open_erased["open_passes"] == 1 and open_erased["history"] == 0
        assert published_erased["history"] == 1 and published_erased["outbox"] == 1
        assert published_erased["recent"] == 1
        assert not {e.text for e in service.recent.latest()} & {OPEN, PUBLISHED}
        data = tmp_path / "data"
        for plate in (OPEN, PUBLISHED):  # no table, no picture, no WAL holds either
            assert _holds(data, plate) == [], plate

        # The broker is back; it still retains the erased plate. The next service on this
        # log (a camera that shows nothing) clears it at its first connect.
        broker.start()  # (from the test's thread: the broker dies with it; no service runs now)
        assert ((await _last(broker)) or {}).get("text") == PUBLISHED
        blank = tmp_path / "blank.ts"
        await asyncio.to_thread(
            subprocess.run,
            ["ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "color=black:s=320x240:r=5",
             "-t", "2", "-c:v", "libx264", str(blank)],
            check=True, timeout=60,
        )  # fmt: skip
        path.write_text(_config(triton_server.grpc_url, blank, broker.port))
        again = Service(load_config(path))
        rerun = asyncio.create_task(again.run())

        async def cleared() -> bool:
            return await _last(broker) is None

        try:
            await _until(cleared, 30, "the clear")
        finally:
            again.request_stop()
            await asyncio.wait_for(rerun, 60)
    for plate in (OPEN, PUBLISHED):
        assert _holds(data, plate) == [], plate
