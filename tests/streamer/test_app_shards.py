"""Two replicas of the service (``--shard 0/2`` and ``1/2``) on one config of six cameras,
with the real CPU Triton: each camera runs on exactly one of them, both show the same map at
``/api/shards``, their metrics say which cameras they hold, and a camera added by a reload
starts only on its replica."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from streamer.foundation.shards import Shard, owner
from streamer.inference.embedded.server import EmbeddedTriton
from tests.streamer.web.running_service import CLIP, RunningService, running_service
from tests.webhook_receiver import new_secret

CAMERAS = ["gate", "yard", "exit", "lane-1", "lane-2", "dock"]


def config_text(triton_url: str, cameras: list[str]) -> str:
    lines = [f"  - {{name: {n}, url: '{CLIP}', sample_fps: 1}}" for n in cameras]
    return (
        "cameras:\n" + "\n".join(lines) + "\n"
        f"triton: {{url: '{triton_url}'}}\n"
        "events: {stdout: false}\nmetrics: {enabled: false}\nweb: {port: 0}\n"
        "storage: {enabled: false}\n"
    )


def get(running: RunningService, path: str) -> Any:
    with urllib.request.urlopen(running.base + path, timeout=10) as answer:
        body = answer.read().decode()
    return json.loads(body) if path.startswith("/api/") else body


def running_cameras(running: RunningService) -> set[str]:
    return {c["name"] for c in get(running, "/api/cameras")}


def test_two_replicas_share_the_cameras_without_overlap(
    triton_server: EmbeddedTriton, tmp_path: Path
) -> None:
    secret = new_secret()
    text = config_text(triton_server.grpc_url, CAMERAS)
    paths = [tmp_path / f"replica-{i}" / "site.yaml" for i in range(2)]
    for path in paths:
        path.parent.mkdir()
    with (
        running_service(paths[0], text, secret, shard=Shard(0, 2)) as first,
        running_service(paths[1], text, secret, shard=Shard(1, 2)) as second,
    ):
        replicas = [first, second]
        held = [running_cameras(r) for r in replicas]
        assert held[0].isdisjoint(held[1]) and held[0] | held[1] == set(CAMERAS)
        assert held[0] and held[1]  # six cameras: both get some
        expected = {camera: owner(camera, 2) for camera in CAMERAS}
        for index, replica in enumerate(replicas):
            assert get(replica, "/api/shards") == {"shard": f"{index}/2", "cameras": expected}
            assert held[index] == {c for c, i in expected.items() if i == index}
            scrape = replica.service.metrics.registry
            for camera in CAMERAS:
                value = scrape.get_sample_value(
                    "lpr_shard_camera", {"shard": f"{index}/2", "camera": camera}
                )
                assert value == (1 if camera in held[index] else None)
        # Every camera of each replica really reads frames.
        deadline = time.monotonic() + 60
        while not all(
            all(c["state"] == "connected" for c in get(r, "/api/cameras")) for r in replicas
        ):
            assert time.monotonic() < deadline, "not every camera connected"
            time.sleep(0.2)

        added = "dock-2"
        for path, replica in zip(paths, replicas, strict=True):
            path.write_text(config_text(triton_server.grpc_url, [*CAMERAS, added]))
            outcome = replica.call(replica.service.reload("test"))
            assert outcome["outcome"] in ("applied", "unchanged"), outcome
        mine = owner(added, 2)
        assert added in running_cameras(replicas[mine])
        assert added not in running_cameras(replicas[1 - mine])
