"""Cameras over two real CPU Tritons (streamer/inference/pool.py): a ``kill -9`` of one moves
its cameras to the other within 5 s, no frame is answered twice (each Triton answered
exactly the frames the pool says it did), and restarted, it gets its cameras back a few at
a time, each camera moving once away and once back. A Triton told to stop (SIGTERM) is let
go, so that it can exit."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
import urllib.request
from collections import Counter
from typing import TYPE_CHECKING

import cv2
import numpy as np
import pytest

from converters import assets
from streamer.config import TritonConfig
from streamer.domain.frames import Frame
from streamer.inference.client import InferenceError
from streamer.inference.embedded.process import python_stubs
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.inference.pool import TritonPool

if TYPE_CHECKING:
    from tests.conftest import SpareTriton

FAILOVER_S = 5.0
#: The embedded Triton's --exit-timeout-secs.
SERVER_EXIT_TIMEOUT_S = 10.0


def _car() -> np.ndarray:
    path = assets.verify(assets.asset("car.jpg"), assets.default_assets_dir())
    return cv2.resize(cv2.imread(str(path)), (640, 360), interpolation=cv2.INTER_AREA)


def _successes(server: EmbeddedTriton) -> int:
    """Requests ``plate_recognition`` answered successfully, from Triton's own metrics."""
    with urllib.request.urlopen(server.metrics_url, timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith('nv_inference_request_success{model="plate_recognition"'):
                return int(float(line.rsplit(" ", 1)[1]))
    return 0


class Feeder:
    """Cameras sending a frame every ``period_s`` through the pool; every outcome recorded
    with the endpoint whose permit the frame held."""

    def __init__(self, pool: TritonPool, cameras: list[str], period_s: float = 0.25) -> None:
        self.pool, self.cameras, self.period_s = pool, cameras, period_s
        self.answers: list[tuple[str, str, float]] = []  # camera, endpoint, monotonic
        self.failures: list[tuple[str, str]] = []
        self._image = _car()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._feed(c)) for c in self.cameras]

    async def stop(self) -> None:
        """Each camera finishes the frame it has at Triton (so every answer is recorded)."""
        self._stopping = True
        _, late = await asyncio.wait(self._tasks, timeout=60)
        for task in late:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _feed(self, camera: str) -> None:
        index = 0
        while not self._stopping:
            index += 1
            permit = await self.pool.acquire(camera)
            granted_by = self.pool.endpoint_of_permit(permit)
            assert granted_by is not None
            endpoint = granted_by.url
            frame = Frame(camera, index, index / 4, time.time(), time.monotonic(), self._image)
            try:
                await self.pool.recognise(frame, permit)
            except InferenceError as exc:
                self.failures.append((camera, str(exc)))
            else:
                self.answers.append((camera, endpoint, time.monotonic()))
            await asyncio.sleep(self.period_s)

    def answered_via(self, endpoint: str) -> int:
        return sum(1 for _, e, _ in self.answers if e == endpoint)


async def _until(predicate, timeout_s: float, what: str) -> float:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout_s, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def _started_pool(config: TritonConfig) -> tuple[TritonPool, list[str]]:
    """The pool of ``config``, both endpoints healthy, and cameras until each endpoint has at
    least two (the ports, hence the hashes, vary from run to run)."""
    pool = TritonPool(config, config.endpoints)
    await pool.start()
    await _until(lambda: all(e.ok for e in pool.endpoints.values()), 60, "both healthy")
    cameras: list[str] = []
    while min(len(pool.cameras_of(u)) for u in pool.endpoints) < 2:
        cameras.append(f"cam-{len(cameras)}")
        pool.set_weight(cameras[-1], 1.0)
    return pool, cameras


async def test_kill_9_of_one_triton_moves_its_cameras_and_they_come_back(
    triton_server: EmbeddedTriton, spare_triton: SpareTriton, caplog: pytest.LogCaptureFixture
) -> None:
    second = await spare_triton.running()
    first_url, second_url = triton_server.grpc_url, second.grpc_url
    config = TritonConfig(
        urls=(first_url, second_url),
        request_timeout_s=30,
        health_interval_s=0.5,
        recover_after_s=2,
        rebalance_s=4,
    )
    caplog.set_level(logging.INFO, logger="streamer.inference.pool")
    pool, cameras = await _started_pool(config)
    feeder: Feeder | None = None
    try:
        moved = set(pool.cameras_of(second_url))
        first_before = _successes(triton_server)
        feeder = Feeder(pool, cameras)
        feeder.start()
        await _until(lambda: len({c for c, _, _ in feeder.answers}) == len(cameras), 60, "all")

        os.kill(second.pid, signal.SIGKILL)  # type: ignore[arg-type]
        killed_at = time.monotonic()

        def answered_since_kill(camera: str) -> float | None:
            times = [t for c, e, t in feeder.answers if c == camera and t > killed_at]
            return min(times) - killed_at if times else None

        await _until(
            lambda: all(answered_since_kill(c) is not None for c in moved), 30, "moved answers"
        )
        failover = {c: answered_since_kill(c) for c in moved}
        print(f"answered again through {first_url} after (s): {failover}")
        assert max(failover.values()) < FAILOVER_S, failover  # type: ignore[type-var]
        assert pool.cameras_of(first_url) == sorted(cameras)
        assert pool.moves["failover"] == len(moved)
        assert pool.endpoints[second_url].share.state(time.monotonic()) == "down"

        # Back on the same port: after recover_after_s, its cameras return over rebalance_s.
        second = await spare_triton.running()  # the same port
        assert second.grpc_url == second_url
        back = await _until(lambda: pool.cameras_of(second_url), 60, "a camera back")
        await _until(lambda: set(pool.cameras_of(second_url)) == moved, 30, "all back")
        returned_at = time.monotonic()
        await _until(
            lambda: all(
                any(
                    c == camera and e == second_url and t > returned_at
                    for c, e, t in feeder.answers
                )
                for camera in moved
            ),
            30,
            "answers from the restarted Triton",
        )
        print(f"first camera back {back:.1f} s after the restart was ready")
    finally:
        if feeder is not None:
            await feeder.stop()
        await pool.close()

    # No frame answered twice: the surviving Triton answered exactly the frames the pool
    # says it did (none of the killed one's frames was sent to it again).
    assert _successes(triton_server) - first_before == feeder.answered_via(first_url)
    # Each moved camera went away once and came back once; the others never moved.
    moves = Counter(
        r.getMessage().split()[1] for r in caplog.records if " moves from Triton " in r.getMessage()
    )
    assert moves == Counter({c: 2 for c in moved}), moves
    assert pool.moves == {"failover": len(moved), "rebalance": len(moved)}
    # The frames that failed were those the killed Triton held, and failed as such.
    assert all("Triton" in why for _, why in feeder.failures), feeder.failures


async def test_a_frozen_triton_s_cameras_move_at_its_failed_readiness_check(
    triton_server: EmbeddedTriton, spare_triton: SpareTriton
) -> None:
    """SIGSTOP: the stream stays open, but the readiness check is not answered. The cameras
    move within health_interval_s + health_timeout_s; the frames the frozen Triton held fail
    then, not at their deadline; after SIGCONT they come back."""
    second = await spare_triton.running()
    first_url, second_url = triton_server.grpc_url, second.grpc_url
    config = TritonConfig(
        urls=(first_url, second_url),
        request_timeout_s=30,
        health_interval_s=0.5,
        health_timeout_s=1.0,
        recover_after_s=1,
        rebalance_s=1,
    )
    pool, cameras = await _started_pool(config)
    feeder: Feeder | None = None
    frozen = False
    try:
        moved = set(pool.cameras_of(second_url))
        feeder = Feeder(pool, cameras)
        feeder.start()
        await _until(lambda: len({c for c, _, _ in feeder.answers}) == len(cameras), 60, "all")

        os.kill(second.pid, signal.SIGSTOP)  # type: ignore[arg-type]
        frozen, stopped_at = True, time.monotonic()
        await _until(lambda: pool.cameras_of(second_url) == [], 10, "the cameras moved")
        moved_after = time.monotonic() - stopped_at
        await _until(
            lambda: all(
                any(c == camera and t > stopped_at for c, _, t in feeder.answers)
                for camera in moved
            ),
            30,
            "answers through the other",
        )
        answered_after = time.monotonic() - stopped_at
        print(f"frozen: cameras moved after {moved_after:.1f} s, answered {answered_after:.1f} s")
        assert moved_after < config.health_interval_s + config.health_timeout_s + 1.0
        assert answered_after < FAILOVER_S
        assert "readiness check unanswered" in (pool.endpoints[second_url].check_error or "")
        held_failed = [why for _, why in feeder.failures if "its cameras moved" in why]
        assert held_failed  # failed when the cameras moved, not 30 s later at their deadline

        os.kill(second.pid, signal.SIGCONT)  # type: ignore[arg-type]
        frozen = False
        await _until(lambda: set(pool.cameras_of(second_url)) == moved, 60, "back")
    finally:
        if frozen:
            os.kill(second.pid, signal.SIGCONT)  # type: ignore[arg-type]
        if feeder is not None:
            await feeder.stop()
        await pool.close()


async def test_a_triton_whose_stub_died_loses_its_cameras_to_the_other(
    triton_server: EmbeddedTriton, spare_triton: SpareTriton
) -> None:
    """kill -9 of a Python-backend stub of one Triton (its process stays, and says it is
    ready: Triton does not start the stub again): its model fails every frame, so the pool
    takes it for down and its cameras answer through the other."""
    second = await spare_triton.running()
    first_url, second_url = triton_server.grpc_url, second.grpc_url
    config = TritonConfig(urls=(first_url, second_url), request_timeout_s=30)
    pool, cameras = await _started_pool(config)
    feeder: Feeder | None = None
    try:
        moved = set(pool.cameras_of(second_url))
        feeder = Feeder(pool, cameras)
        feeder.start()
        await _until(lambda: len({c for c, _, _ in feeder.answers}) == len(cameras), 60, "all")

        assert second.pid is not None
        stubs = python_stubs(second.pid)
        os.kill(next(p for p, name in stubs.items() if name == "lprnet_0_0"), signal.SIGKILL)
        killed_at = time.monotonic()
        await _until(lambda: pool.cameras_of(second_url) == [], 30, "the cameras moved")
        await _until(
            lambda: all(
                any(c == camera and t > killed_at for c, _, t in feeder.answers) for camera in moved
            ),
            30,
            "answers through the other",
        )
        print(f"stub killed: the cameras answered again {time.monotonic() - killed_at:.1f} s on")
        assert second.running and second.dead_stubs == ["lprnet_0_0"]  # Triton itself stays
        assert pool.endpoints[second_url].share.state(time.monotonic()) == "down"
        assert "Stub process 'lprnet_0_0' is not healthy" in (
            pool.endpoints[second_url].client.last_model_error or ""
        )
    finally:
        if feeder is not None:
            await feeder.stop()
        await pool.close()
        # Nothing starts the stub again: the next test that needs the spare gets a new one.
        os.kill(second.pid, signal.SIGKILL)  # type: ignore[arg-type]


async def test_an_idle_stream_outlives_many_keepalive_pings(triton_server: EmbeddedTriton) -> None:
    """No frame for 8 s with a keepalive ping every second: Triton keeps the stream (a gRPC
    server may police pings on a connection without data and close it), and the endpoint
    stays healthy and answers the next frame."""
    config = TritonConfig(url=triton_server.grpc_url, keepalive_time_s=1, keepalive_timeout_s=1)
    pool = TritonPool(config, config.endpoints)
    try:
        await pool.start()
        await pool.wait_ready(30)
        (endpoint,) = pool.endpoints.values()
        await asyncio.sleep(8)
        assert endpoint.client.ready and endpoint.client.stats.reconnects == 0
        assert endpoint.share.state(time.monotonic()) == "serving"
        pool.set_weight("cam", 1.0)
        frame = Frame("cam", 1, 0.0, time.time(), time.monotonic(), _car())
        await pool.recognise(frame)
        assert endpoint.client.stats.succeeded == 1
    finally:
        await pool.close()


async def test_a_triton_told_to_stop_is_let_go_so_that_it_can_exit(
    spare_triton: SpareTriton, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGTERM to the only Triton while a camera streams to it: Triton drains and answers
    every call "Server exiting", and cannot exit while a client keeps a stream open. The pool
    closes the stream at the next readiness check and does not open it again, so the server
    exits within its exit timeout (it waited for the stream past 120 s before)."""
    server = await spare_triton.running()
    config = TritonConfig(urls=(server.grpc_url,), request_timeout_s=30)
    pool = TritonPool(config, config.endpoints)
    await pool.start()
    feeder = Feeder(pool, ["cam-0"])
    try:
        await _until(lambda: pool.ready, 60, "the stream")
        feeder.start()
        await _until(lambda: bool(feeder.answers), 60, "a first answer")
        assert server.pid is not None
        with caplog.at_level(logging.WARNING, logger="streamer.inference.pool"):
            os.kill(server.pid, signal.SIGTERM)
            took = await _until(lambda: not server.running, SERVER_EXIT_TIMEOUT_S + 10, "exit")
        print(f"Triton exited {took:.1f} s after its SIGTERM")
        assert any("is shutting down" in r.getMessage() for r in caplog.records)
        assert not pool.ready  # (nothing to reconnect to)
    finally:
        await feeder.stop()
        await pool.close()
        if server.running:
            os.kill(server.pid, signal.SIGKILL)  # type: ignore[arg-type]
