"""Scale-out figures: frames/s with 1 and 2 Tritons, and fail-over time over repeated kills.

    .venv/bin/python -m bench.scale_out [--cameras 8] [--seconds 20] [--kills 10]
        [--json bench/results/scale_out.json]

Starts two embedded CPU Tritons on ``model_repository/`` and drives the service's inference
client (``streamer.inference.pool.TritonPool``) from this process:

* **Throughput.** ``--cameras`` cameras send the car picture (640x360) as fast as their
  permits allow, first over one Triton, then over both; answers/s over ``--seconds`` after a
  5 s warm-up, and their ratio. On one machine the two Tritons share its cores: the ratio
  says what a second server gives here, not what a second GPU gives.
* **Fail-over.** Four cameras at 4 frames/s over both Tritons; ``--kills`` times: ``kill -9``
  of the second, the time until every camera it served has an answer from the first
  (per kill: the slowest camera), then the second is started again on its port and its
  cameras move back. The median and the worst.

Prints a table and writes the raw figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from bench.common import PROJECT_ROOT
from converters import assets
from streamer.config import TritonConfig
from streamer.domain.frames import Frame
from streamer.inference.client import InferenceError
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.inference.pool import TritonPool

MODEL_REPOSITORY = PROJECT_ROOT / "model_repository"
WARMUP_S = 5.0


def _picture() -> np.ndarray:
    path = assets.verify(assets.asset("car.jpg"), assets.default_assets_dir())
    return cv2.resize(cv2.imread(str(path)), (640, 360), interpolation=cv2.INTER_AREA)


class Cameras:
    """Cameras sending ``picture`` through ``pool``; each answer's time and endpoint."""

    def __init__(self, pool: TritonPool, names: list[str], period_s: float) -> None:
        self.pool, self.names, self.period_s = pool, names, period_s
        self.answers: list[tuple[str, str, float]] = []
        self.failed = 0
        self._picture = _picture()
        self._stop = False
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        for name in self.names:
            self.pool.set_weight(name, 1.0)
        self._tasks = [asyncio.create_task(self._feed(n)) for n in self.names]

    async def stop(self) -> None:
        self._stop = True
        _, late = await asyncio.wait(self._tasks, timeout=60)
        for task in late:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _feed(self, name: str) -> None:
        index = 0
        while not self._stop:
            index += 1
            permit = await self.pool.acquire(name)
            granted_by = self.pool.endpoint_of_permit(permit)
            url = granted_by.url if granted_by is not None else "removed"
            frame = Frame(name, index, index * 0.1, time.time(), time.monotonic(), self._picture)
            try:
                await self.pool.recognise(frame, permit)
            except InferenceError:
                self.failed += 1
            else:
                self.answers.append((name, url, time.monotonic()))
            if self.period_s:
                await asyncio.sleep(self.period_s)


async def _until(predicate: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("bench: timed out")
        await asyncio.sleep(0.02)


def _config(urls: list[str]) -> TritonConfig:
    return TritonConfig(
        urls=tuple(urls),
        request_timeout_s=30,
        health_interval_s=0.5,
        recover_after_s=1,
        rebalance_s=1,
    )


async def throughput(urls: list[str], cameras: int, seconds: float) -> float:
    """Answers/s of ``cameras`` cameras sending as fast as they may over ``urls``."""
    pool = TritonPool(_config(urls), urls)
    await pool.start()
    try:
        await _until(lambda: all(e.ok for e in pool.endpoints.values()), 60)
        feed = Cameras(pool, [f"cam-{i}" for i in range(cameras)], 0.0)
        feed.start()
        await asyncio.sleep(WARMUP_S)
        start, before = time.monotonic(), len(feed.answers)
        await asyncio.sleep(seconds)
        rate = (len(feed.answers) - before) / (time.monotonic() - start)
        await feed.stop()
        return rate
    finally:
        await pool.close()


async def failover(first: EmbeddedTriton, second: EmbeddedTriton, kills: int) -> list[float]:
    """Per kill of ``second``: seconds until every camera it served answered via ``first``."""
    urls = [first.grpc_url, second.grpc_url]
    port = int(second.grpc_url.rsplit(":", 1)[1])
    pool = TritonPool(_config(urls), urls)
    await pool.start()
    times: list[float] = []
    feed: Cameras | None = None
    try:
        await _until(lambda: all(e.ok for e in pool.endpoints.values()), 60)
        names: list[str] = []
        while not pool.cameras_of(second.grpc_url) or len(names) < 4:
            names.append(f"cam-{len(names)}")
            pool.set_weight(names[-1], 1.0)
        second_url = second.grpc_url
        home = pool.cameras_of(second_url)  # where they return once it is back
        feed = Cameras(pool, names, 0.25)
        feed.start()
        answers = feed.answers

        def all_answered(since: float) -> bool:
            return all(any(c == m and t > since for c, _, t in answers) for m in home)

        for round_ in range(kills):
            await _until(lambda: pool.cameras_of(second_url) == home, 90)
            moved = home
            await asyncio.sleep(2.0)
            os.kill(second.pid, signal.SIGKILL)  # type: ignore[arg-type]
            killed = time.monotonic()
            await _until(lambda since=killed: all_answered(since), 60)
            worst = max(
                min(t for c, _, t in feed.answers if c == camera and t > killed) - killed
                for camera in moved
            )
            times.append(worst)
            print(f"kill {round_ + 1}: {len(moved)} camera(s) answered again within {worst:.2f} s")
            await second.astop()
            second = EmbeddedTriton(MODEL_REPOSITORY, grpc_port=port)
            await second.astart()
    finally:
        if feed is not None:
            await feed.stop()
        await pool.close()
        await second.astop()
    return times


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    first = EmbeddedTriton(MODEL_REPOSITORY)
    second = EmbeddedTriton(MODEL_REPOSITORY)
    await asyncio.gather(first.astart(), second.astart())
    try:
        one = await throughput([first.grpc_url], args.cameras, args.seconds)
        two = await throughput([first.grpc_url, second.grpc_url], args.cameras, args.seconds)
        print(f"frames/s: 1 Triton {one:.2f}, 2 Tritons {two:.2f} (x{two / one:.2f})")
        kills = await failover(first, second, args.kills)
    finally:
        await first.astop()
        await second.astop()
    return {
        "cameras": args.cameras,
        "seconds": args.seconds,
        "frames_per_s": {"one_triton": one, "two_tritons": two, "ratio": two / one},
        "failover_s": {
            "kills": kills,
            "median": statistics.median(kills),
            "worst": max(kills),
        },
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_out", description=__doc__)
    parser.add_argument("--cameras", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument(
        "--json", type=Path, default=PROJECT_ROOT / "bench" / "results" / "scale_out.json"
    )
    args = parser.parse_args(argv)
    if args.cameras < 1 or args.seconds <= 0 or args.kills < 1:
        parser.error("--cameras, --seconds and --kills must be positive")
    result = asyncio.run(main_async(args))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    fps, kills = result["frames_per_s"], result["failover_s"]
    print("| figure | value |\n| --- | --- |")
    print(f"| frames/s, 1 Triton ({args.cameras} cameras) | {fps['one_triton']:.2f} |")
    print(f"| frames/s, 2 Tritons | {fps['two_tritons']:.2f} (x{fps['ratio']:.2f}) |")
    print(
        f"| fail-over, {len(kills['kills'])} kills -9 | median {kills['median']:.2f} s, "
        f"worst {kills['worst']:.2f} s |"
    )
    print(f"raw: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
