"""The scale-out acceptance on real processes: two CPU Tritons and two replicas of the
service (``--shard 0/2``, ``1/2``) over six RTSP cameras of a real RTSP server (GStreamer),
one webhook receiver and one PostgreSQL history.

Each camera runs on exactly one replica; ``kill -9`` of one Triton mid-run: every camera
answers again through the other within 5 s and goes on reading plates, both replicas stay
ready and name the dead endpoint, every camera's pass arrives, and every pass in the one
history reached the one receiver, signed, and the other way round."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg

from streamer.foundation.shards import Shard, owner
from streamer.inference.embedded.server import EmbeddedTriton
from tests.postgres_server import PostgresServer
from tests.rtsp_server import RtspServer
from tests.streamer.web.running_service import CLIP, RunningService, running_service
from tests.webhook_receiver import Receiver, new_secret

if TYPE_CHECKING:
    from tests.conftest import SpareTriton

CAMERAS = ["gate", "yard", "exit", "lane-1", "lane-2", "dock"]
PLATE = "O567AM76"  # the black car's plate
FAILOVER_S = 5.0


@contextlib.contextmanager
def shared_receiver() -> Iterator[Receiver]:
    """One webhook receiver for both replicas, on an event loop of its own."""
    ready: concurrent.futures.Future[Receiver] = concurrent.futures.Future()
    stop = threading.Event()

    async def main() -> None:
        receiver = await Receiver(new_secret()).start()
        ready.set_result(receiver)
        await asyncio.to_thread(stop.wait)
        await receiver.stop()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    try:
        yield ready.result(30)
    finally:
        stop.set()
        thread.join(30)


def _until(predicate: object, timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() - start < timeout_s, f"timed out waiting for {what}"
        time.sleep(0.1)
    return time.monotonic() - start


def _stored_ids(dsn: str) -> set[str]:
    async def query() -> set[str]:
        connection = await asyncpg.connect(dsn, timeout=10)
        try:
            # The reported passes: the withheld ones go to no target without withheld: true.
            rows = await connection.fetch("SELECT event_id FROM passes WHERE NOT withheld")
            return {r["event_id"] for r in rows}
        finally:
            await connection.close()

    return asyncio.run(query())


def _plates(replicas: list[RunningService]) -> dict[str, int]:
    return {
        name: camera.pipeline.stats.plates
        for replica in replicas
        for name, camera in list(replica.service.cameras.running.items())
    }


def _answered(replicas: list[RunningService]) -> dict[str, int]:
    return {
        name: camera.pipeline.stats.answered
        for replica in replicas
        for name, camera in list(replica.service.cameras.running.items())
    }


def test_two_tritons_two_replicas_six_rtsp_cameras_survive_a_triton_kill(
    triton_server: EmbeddedTriton,
    spare_triton: SpareTriton,
    postgres: PostgresServer,
    tmp_path: Path,
) -> None:
    second = asyncio.run(spare_triton.running())
    urls = [triton_server.grpc_url, second.grpc_url]
    dsn = postgres.database()
    with RtspServer(CLIP, mounts=[f"/{c}" for c in CAMERAS]) as rtsp, shared_receiver() as rx:
        cameras = "\n".join(
            f"  - {{name: {c}, url: '{rtsp.url('/' + c)}', sample_fps: 1}}" for c in CAMERAS
        )
        text = (
            f"cameras:\n{cameras}\n"
            f"triton: {{urls: [{', '.join(repr(u) for u in urls)}], request_timeout_s: 20,"
            " health_interval_s: 0.5, recover_after_s: 2, rebalance_s: 4}\n"
            "events: {stdout: false}\nmetrics: {enabled: false}\n"
            "web: {port: 0}\n"
            f"storage: {{backend: postgresql, dsn: '{dsn}'}}\n"
            f"webhooks:\n  - {{name: rx, url: '{rx.url}', secret: '{rx.secret}'}}\n"
        )
        with contextlib.ExitStack() as stack:
            replicas = []
            for index in range(2):
                folder = tmp_path / f"replica-{index}"
                folder.mkdir()
                replicas.append(
                    stack.enter_context(
                        running_service(
                            folder / "site.yaml", text, new_secret(), shard=Shard(index, 2)
                        )
                    )
                )
            _until(lambda: len(_answered(replicas)) == len(CAMERAS), 60, "the cameras started")
            held = [set(r.service.cameras.running) for r in replicas]
            assert held[0].isdisjoint(held[1]) and held[0] | held[1] == set(CAMERAS)
            assert all(held[i] == {c for c in CAMERAS if owner(c, 2) == i} for i in range(2))
            _until(
                lambda: (
                    all(n > 0 for n in _answered(replicas).values())
                    and len(_answered(replicas)) == len(CAMERAS)
                ),
                120,
                "answers from every camera",
            )
            pools = [r.service.recognizer for r in replicas]
            _until(lambda: all(e.ok for p in pools for e in p.endpoints.values()), 60, "healthy")  # type: ignore[union-attr]
            on_second = [c for p in pools for c in p.cameras_of(second.grpc_url)]  # type: ignore[union-attr]
            print(f"cameras on the Triton to be killed: {on_second}")

            before = _answered(replicas)
            os.kill(second.pid, signal.SIGKILL)  # type: ignore[arg-type]
            took = _until(
                lambda: all(_answered(replicas)[c] > before[c] for c in CAMERAS),
                30,
                "an answer from every camera after the kill",
            )
            print(f"every camera answered again within {took:.1f} s of the kill")
            assert took < FAILOVER_S
            for replica in replicas:
                ready, details = replica.service.readiness()
                assert ready and details["triton"] == "ready", details
                endpoints = details["triton_endpoints"]
                assert endpoints[second.grpc_url]["state"] == "down"
                assert endpoints[second.grpc_url]["cameras"] == 0
                assert endpoints[second.grpc_url]["problem"]
                mine = len(replica.service.cameras.running)
                assert endpoints[urls[0]] == {"state": "serving", "cameras": mine, "problem": None}
                sample = replica.service.metrics.registry.get_sample_value
                assert sample("lpr_triton_endpoint_healthy", {"endpoint": second.grpc_url}) == 0
                assert sample("lpr_triton_endpoint_cameras", {"endpoint": urls[0]}) == mine
            moves = sum(
                r.service.metrics.registry.get_sample_value(
                    "lpr_triton_camera_moves_total", {"reason": "failover"}
                )
                or 0
                for r in replicas
            )
            assert moves == len(on_second)

            # Reads go on for every camera. (The RTSP server loops the clip seamlessly, so
            # the black car stays in view: one pass per camera, not one per loop.)
            plates = _plates(replicas)
            _until(lambda: all(_plates(replicas)[c] > plates[c] for c in CAMERAS), 60, "more reads")
            _until(
                lambda: {r.payload["camera"] for r in rx.delivered()} == set(CAMERAS),
                60,
                "a pass from every camera",
            )
            assert PLATE in {r.payload["text"] for r in rx.delivered()}
            # Every pass in the one history reached the one receiver, signed.
            stored = _stored_ids(dsn)
            _until(lambda: stored <= set(rx.delivered_ids()), 30, "every stored pass delivered")
            assert all(r.verified for r in rx.requests)
            delivered_v1 = {r.webhook_id for r in rx.delivered() if r.payload["version"] == 1}
            _until(lambda: delivered_v1 <= _stored_ids(dsn), 30, "every delivered pass stored")
