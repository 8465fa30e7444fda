"""``kill -9`` of a replica (``python -m streamer run --shard 0/2``) while its webhook
receiver refuses: restarted on its own outbox, it runs the same cameras again, delivers
every event it had not delivered, and anything delivered twice has the same event id and
the same content."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import urllib.request
from collections import defaultdict
from pathlib import Path

from converters import assets
from converters.paths import PROJECT_ROOT
from streamer.foundation.shards import owner
from streamer.inference.embedded.server import EmbeddedTriton
from tests.polling import until
from tests.webhook_receiver import Receiver, answer, new_secret

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
CAMERAS = ["gate", "yard", "exit", "lane-1", "lane-2", "dock"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def _start(config: Path, *extra: str) -> subprocess.Popen[str]:
    """``streamer run`` on ``config`` (with ``extra`` arguments), its log on stderr."""
    return subprocess.Popen(
        [sys.executable, "-m", "streamer", "run", "--config", str(config), *extra],
        cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_a_killed_replica_resumes_its_cameras_and_delivers_what_it_had_not(
    tmp_path: Path, triton_server: EmbeddedTriton
) -> None:
    receiver = await Receiver(new_secret()).start()
    receiver.default = answer(503, "down")  # nothing is delivered before the kill
    port = _free_port()
    cameras = "\n".join(
        f"  - {{name: {n}, url: '{CLIP}', sample_fps: 2, realtime: true}}" for n in CAMERAS
    )
    config = tmp_path / "site.yaml"
    config.write_text(
        f"cameras:\n{cameras}\n"
        f"triton: {{url: '{triton_server.grpc_url}'}}\n"
        "events: {stdout: false, dedup_window_s: 1}\n"
        f"metrics: {{port: {port}}}\nweb: {{enabled: false}}\n"
        f"webhooks:\n  - {{name: rx, url: '{receiver.url}', secret: '{receiver.secret}',"
        " retry_initial_delay_s: 0.2, retry_max_delay_s: 1}\n"
    )
    mine = sorted(c for c in CAMERAS if owner(c, 2) == 0)
    assert mine
    process = _start(config, "--shard", "0/2")
    try:
        depth = 'lpr_outbox_depth{target="rx"}'

        def pending() -> float:
            try:
                return _scrape(port).get(depth, 0.0)
            except OSError:
                return 0.0

        await until(lambda: pending() >= 3, 180, "events waiting in the outbox")
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        refused = {r.webhook_id for r in receiver.requests}
        assert refused and not receiver.delivered()

        receiver.default = answer(200, "ok")
        process = _start(config, "--shard", "0/2")  # the same config: the same outbox file
        await until(lambda: refused <= set(receiver.delivered_ids()), 120, "the pending events")
        held = {
            name.split('camera="')[1].split('"')[0]
            for name, value in (await asyncio.to_thread(_scrape, port)).items()
            if name.startswith("lpr_shard_camera{") and value == 1
        }
        assert held == set(mine)
        answered = 'lpr_frames_answered_total{camera="%s"}'
        await until(
            lambda: all(_scrape(port).get(answered % c, 0) > 0 for c in mine), 60, "answers"
        )
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
        await receiver.stop()

    # Twice only as the same message: the same id, the same bytes.
    bodies: dict[str, set[bytes]] = defaultdict(set)
    for request in receiver.delivered():
        bodies[request.webhook_id].add(json.dumps(request.body_json, sort_keys=True).encode())
    assert all(len(b) == 1 for b in bodies.values()), bodies
    assert {r.payload["camera"] for r in receiver.delivered()} <= set(mine)
