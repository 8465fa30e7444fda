"""kill -9 of the service at random moments, again and again, while a real webhook receiver
fails two POSTs in three, slowly: after the restarts (and a last run with ``--once`` that waits for
every consumer), every event the service committed to its log reached the receiver and the
history, each by its id. Real processes, a real CPU Triton, the clip looping in real time.

``LPR_TEST_KILLS`` sets the number of kills (20 by default)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import sys
import time
from pathlib import Path

from aiohttp import web

from converters import assets
from converters.paths import PROJECT_ROOT
from streamer.inference.embedded.server import EmbeddedTriton
from tests.webhook_receiver import Received, Receiver, new_secret

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
KILLS = int(os.environ.get("LPR_TEST_KILLS", "20"))
#: A kill lands this long (drawn at random) after the service said it runs its camera: from
#: before the first event (about 3 s) to past the second (about 6.5 s) and its deliveries.
KILL_AFTER_S = (0.3, 7.5)


def _config(triton_url: str, receiver_url: str, secret: str) -> str:
    return (
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 5, realtime: true}}\n"
        f"triton: {{url: '{triton_url}'}}\n"
        # Every loop of the clip is new passes: no deduplication across loops.
        "events: {stdout: false, dedup_window_s: 0}\n"
        "metrics: {enabled: false}\nweb: {enabled: false}\n"
        f"webhooks:\n  - {{name: rx, url: '{receiver_url}', secret: '{secret}',\n"
        "      retry_initial_delay_s: 0.5, retry_max_delay_s: 2.0}\n"
    )


def _slow_and_mostly_failing() -> object:
    """Two POSTs in three fail, each answer after 0.3 s: deliveries are pending or in flight
    at many of the kills (one in flight at a kill is sent again, with the same id)."""
    count = 0

    async def respond(_: Received) -> web.Response:
        nonlocal count
        count += 1
        await asyncio.sleep(0.3)
        return web.Response(status=204 if count % 3 == 0 else 500)

    return respond


async def _start(config: Path, log: Path, *extra: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "LPR_ASSETS_DIR": str(assets.default_assets_dir())}
    with log.open("ab") as err:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "streamer", "run", "--config", str(config), *extra,
            cwd=PROJECT_ROOT, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=err,
        )  # fmt: skip


async def _until_running(log: Path, since: int, process: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + 60
    while b"running 1 camera(s)" not in log.read_bytes()[since:]:  # noqa: ASYNC240 (tiny)
        assert process.returncode is None, log.read_text()[-3000:]  # noqa: ASYNC240
        assert time.monotonic() < deadline, "the service did not start"
        await asyncio.sleep(0.05)


def _rows(path: Path, sql: str) -> list[str]:
    with sqlite3.connect(path) as db:
        return [str(row[0]) for row in db.execute(sql)]


async def test_kill_9_again_and_again_loses_no_committed_event(
    triton_server: EmbeddedTriton, tmp_path: Path
) -> None:
    secret = new_secret()
    receiver = await Receiver(secret).start()
    receiver.default = _slow_and_mostly_failing()  # type: ignore[assignment]
    rng = random.Random(26)
    config, log = tmp_path / "site.yaml", tmp_path / "service.log"
    config.write_text(_config(triton_server.grpc_url, receiver.url, secret))
    log.touch()
    outbox, history = tmp_path / "data" / "outbox.sqlite3", tmp_path / "data" / "events.sqlite3"
    left_at_kills = 0  # deliveries a kill left pending, for the next start to make
    try:
        for _ in range(KILLS):
            since = log.stat().st_size
            process = await _start(config, log)
            await _until_running(log, since, process)
            await asyncio.sleep(rng.uniform(*KILL_AFTER_S))
            process.send_signal(signal.SIGKILL)
            assert await process.wait() == -signal.SIGKILL
            if outbox.exists():
                pending = "SELECT event_id FROM deliveries WHERE state = 'pending'"
                left_at_kills += len(_rows(outbox, pending))
        assert left_at_kills, "no delivery was pending at any kill"
        # The last run plays the clip once more and waits for every consumer.
        process = await _start(config, log, "--once", "--drain-timeout", "60")
        assert await asyncio.wait_for(process.wait(), 180) == 0, log.read_text()[-3000:]
    finally:
        await receiver.stop()
    committed = set(_rows(outbox, "SELECT event_id FROM events"))
    assert len(committed) >= KILLS // 2, "too few events to prove anything"
    assert set(receiver.delivered_ids()) == committed
    kept = _rows(
        history,
        "SELECT CASE version WHEN 1 THEN event_id ELSE event_id || '.v' || version END "
        "FROM versions",
    )
    assert len(kept) == len(set(kept)) and set(kept) == committed
    pending = _rows(outbox, "SELECT event_id FROM deliveries WHERE state != 'delivered'")
    assert pending == []
    twice = len(receiver.delivered_ids()) - len(set(receiver.delivered_ids()))
    print(f"{KILLS} kills: {left_at_kills} deliveries left pending by the kills, "
          f"{len(committed)} events committed, all at the receiver ({twice} delivered twice, "
          "the same id) and in the history")  # fmt: skip
