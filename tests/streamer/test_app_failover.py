"""The service over two real CPU Tritons (``triton.urls``): four looping cameras, a webhook
receiver; ``kill -9`` of one Triton mid-run. Its cameras answer again through the other
within 5 s, the service stays ready and says which endpoint is down and why, the clip's
plate keeps arriving, signed, from every camera, and the metrics count the moves."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from converters import assets
from streamer.app import Service
from streamer.config import load_config
from streamer.inference.embedded.server import EmbeddedTriton
from tests.polling import get_json, until
from tests.webhook_receiver import Receiver, new_secret

if TYPE_CHECKING:
    from tests.conftest import SpareTriton

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
CAMERAS = ["gate", "yard", "exit", "dock"]
#: The black car's plate, read in every loop (the silver car's short pass may be missed while
#: one CPU Triton serves the four cameras).
PLATE = "O567AM76"


def _config(path: Path, urls: list[str], receiver: Receiver) -> Path:
    cameras = "\n".join(
        f"  - {{name: {n}, url: '{CLIP}', sample_fps: 2, realtime: true}}" for n in CAMERAS
    )
    path.write_text(
        f"cameras:\n{cameras}\n"
        f"triton: {{urls: [{', '.join(repr(u) for u in urls)}], request_timeout_s: 20,"
        " health_interval_s: 0.5, recover_after_s: 2, rebalance_s: 4}\n"
        # The clip loops every 8 s: its plates are new passes each time, not duplicates.
        "events: {stdout: false, dedup_window_s: 1}\nmetrics: {port: 0}\nweb: {enabled: false}\n"
        f"webhooks:\n  - {{name: rx, url: '{receiver.url}', secret: '{receiver.secret}'}}\n"
    )
    return path


async def test_a_killed_triton_s_cameras_go_on_through_the_other(
    tmp_path: Path, triton_server: EmbeddedTriton, spare_triton: SpareTriton
) -> None:
    second = await spare_triton.running()
    receiver = await Receiver(new_secret()).start()
    urls = [triton_server.grpc_url, second.grpc_url]
    service = Service(load_config(_config(tmp_path / "two.yaml", urls, receiver)))
    runner = asyncio.create_task(service.run())
    try:
        await until(lambda: service.recognizer is not None and service.ops is not None, 60, "up")
        pool = service.recognizer
        assert pool is not None
        await until(lambda: all(e.ok for e in pool.endpoints.values()), 60, "both healthy")
        await until(
            lambda: (
                len(service.cameras) == len(CAMERAS)
                and all(c.pipeline.stats.answered > 0 for c in service.cameras.values())
            ),
            120,
            "answers from every camera",
        )
        moved = pool.cameras_of(second.grpc_url)
        print(f"cameras on {second.grpc_url}: {moved}; on the other: {pool.cameras_of(urls[0])}")
        answered = {n: c.pipeline.stats.answered for n, c in service.cameras.items()}

        os.kill(second.pid, signal.SIGKILL)  # type: ignore[arg-type]
        killed_at = time.time()
        took = await until(
            lambda: all(
                c.pipeline.stats.answered > answered[n] for n, c in service.cameras.items()
            ),
            30,
            "an answer from every camera",
        )
        print(f"every camera answered again within {took:.1f} s of the kill")
        assert took < 5.0
        assert pool.cameras_of(urls[0]) == sorted(CAMERAS)

        readyz = f"http://127.0.0.1:{service.ops.port}/readyz"  # type: ignore[union-attr]
        status, body = await asyncio.to_thread(get_json, readyz)
        assert status == 200 and body["triton"] == "ready", body
        down = body["triton_endpoints"][second.grpc_url]
        assert down["state"] == "down" and down["cameras"] == 0 and down["problem"], down
        assert body["triton_endpoints"][urls[0]] == {
            "state": "serving",
            "cameras": len(CAMERAS),
            "problem": None,
        }
        registry = service.metrics.registry
        sample = registry.get_sample_value
        assert sample("lpr_triton_endpoint_healthy", {"endpoint": second.grpc_url}) == 0
        assert sample("lpr_triton_endpoint_healthy", {"endpoint": urls[0]}) == 1
        assert sample("lpr_triton_endpoint_cameras", {"endpoint": urls[0]}) == len(CAMERAS)
        assert sample("lpr_triton_camera_moves_total", {"reason": "failover"}) == len(moved)

        # The clip's plate, from every camera, in passes that began after the kill.

        def reported_since() -> dict[str, set[str]]:
            seen: dict[str, set[str]] = {n: set() for n in CAMERAS}
            for request in receiver.delivered():
                payload = request.payload
                first_seen = datetime.fromisoformat(payload["first_seen"]["utc"]).timestamp()
                if first_seen > killed_at:  # a pass that began after the kill
                    seen[payload["camera"]].add(payload["text"])
            return seen

        try:
            await until(lambda: all(PLATE in t for t in reported_since().values()), 90, "plates")
        finally:
            print(f"reported after the kill: {reported_since()}")
        assert all(r.verified for r in receiver.delivered())
    finally:
        service.request_stop()
        await asyncio.wait_for(runner, 120)
        await receiver.stop()
