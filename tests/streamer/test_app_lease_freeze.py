"""Leases with a time to live, on real processes and a real PostgreSQL: a replica frozen
(SIGSTOP) with a camera loses it to its replacement within the TTL; continued (SIGCONT), it
stops the camera before it publishes anything, and no pass it decided after the takeover
reaches the receiver or the history; every event carries its lease's fencing token, the
replacement's a larger one. The standby is a second replica of the same config,
both with ``--shard 0/1``. Two replicas without ``--shard`` (no leases) run onto one camera
are found out within two renewals."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import asyncpg

from converters import assets
from streamer.inference.embedded.server import EmbeddedTriton
from tests.polling import until
from tests.postgres_server import PostgresServer
from tests.streamer.test_app_replica_kill import _free_port, _scrape, _start
from tests.webhook_receiver import Receiver, new_secret

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
#: The publisher's line for each event it committed to the log.
PUBLISHED = re.compile(r"streamer\.delivery\.publisher: event ([0-9a-f-]{36}): ")
TTL_S = 6.0  # (the default is 15 s: shorter here, the test waits for it twice)


def _config(folder: Path, triton: str, dsn: str, webhook: str, secret: str) -> tuple[Path, int]:
    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    config = folder / "site.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 5}}\n"
        f"triton: {{url: '{triton}'}}\n"
        # Every loop of the clip reports its plates again: the frozen replica, continued,
        # has passes to decide at once.
        "events: {stdout: false, dedup_window_s: 0}\n"
        f"metrics: {{port: {port}}}\nweb: {{enabled: false}}\n"
        f"storage: {{backend: postgresql, dsn: '{dsn}', lease_ttl_s: {TTL_S}}}\n"
        f"outbox: {{path: '{folder / 'outbox.sqlite3'}'}}\n"
        f"webhooks:\n  - {{name: rx, url: '{webhook}', secret: '{secret}'}}\n"
    )
    return config, port


def _gauge(port: int, name: str) -> float:
    try:
        return _scrape(port).get(name, 0.0)
    except OSError:
        return 0.0  # (not listening yet, or frozen)


def _stop(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGCONT)
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
    assert process.stderr is not None
    return process.stderr.read()


def _utc(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


async def test_a_frozen_replica_loses_its_camera_and_publishes_nothing_after(
    triton_server: EmbeddedTriton, postgres: PostgresServer, tmp_path: Path
) -> None:
    dsn = postgres.database()
    secret = new_secret()
    receiver = await Receiver(secret).start()
    base = f"http://127.0.0.1:{receiver.port}"
    config_a, port_a = _config(tmp_path / "a", triton_server.grpc_url, dsn, f"{base}/a", secret)
    config_b, port_b = _config(tmp_path / "b", triton_server.grpc_url, dsn, f"{base}/b", secret)
    running = 'lpr_camera_up{camera="yard"}'
    waiting = 'lpr_camera_lease_waiting{camera="yard"}'
    a = _start(config_a, "--shard", "0/1")
    b: subprocess.Popen[str] | None = None
    try:
        await until(lambda: bool(receiver.delivered("/a")), 120, "A's first event")
        b = _start(config_b, "--shard", "0/1")  # the standby
        await until(lambda: _gauge(port_b, waiting) == 1, 60, "B waiting for the lease")
        await asyncio.sleep(TTL_S)  # longer than the TTL: A renews, B still waits
        assert _gauge(port_b, waiting) == 1 and _gauge(port_b, running) == 0

        os.kill(a.pid, signal.SIGSTOP)
        frozen_at, frozen_wall = time.monotonic(), time.time()
        taken = await until(lambda: _gauge(port_b, running) == 1, TTL_S + 10, "B running yard")
        print(f"the replacement ran the camera {taken:.1f} s after the freeze (TTL {TTL_S} s)")
        assert taken <= TTL_S + 5
        await until(lambda: bool(receiver.delivered("/b")), 60, "B's first event")

        os.kill(a.pid, signal.SIGCONT)
        continued = time.monotonic()
        await until(lambda: _gauge(port_a, running) == 0, 30, "A to stop the camera")
        await asyncio.sleep(8)  # A has had frames in hand, and passes to decide
        assert _gauge(port_a, running) == 0 and _gauge(port_b, running) == 1
    finally:
        err_a = _stop(a)
        err_b = _stop(b) if b is not None else ""
        print("A:", err_a[-3000:], "\nB:", err_b[-3000:])  # (shown on a failure)
        await receiver.stop()
    print(f"frozen {continued - frozen_at:.1f} s")
    # Nothing A decided after the freeze reached the receiver...
    late = [
        r.payload["event_id"]
        for r in receiver.delivered("/a")
        if _utc(r.payload["last_seen"]["utc"]) > frozen_wall
    ]
    assert late == [], late
    assert "lease not renewed in time" in err_a, err_a[-3000:]
    # ...or the history: every pass there seen after the freeze is one B published.
    published_by_b = set(PUBLISHED.findall(err_b))
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch("SELECT event_id, payload FROM passes")
    finally:
        await connection.close()
    assert rows, "no history"
    after = {
        row["event_id"]
        for row in rows
        if _utc(json.loads(row["payload"])["last_seen"]["utc"]) > frozen_wall
    }
    assert after and after <= published_by_b, (after - published_by_b, err_b[-2000:])
    assert not after & set(PUBLISHED.findall(err_a))
    # Every event carries the lease it was decided under: B's took over with a larger token.
    tokens = {row["event_id"]: json.loads(row["payload"])["lease"]["token"] for row in rows}
    by_a = {tokens[e] for e in set(PUBLISHED.findall(err_a)) if e in tokens}
    by_b = {tokens[e] for e in after}
    assert by_a and len(by_b) == 1 and max(by_a) < min(by_b), (by_a, by_b)


async def test_a_camera_run_on_two_replicas_is_found_within_two_renewals(
    triton_server: EmbeddedTriton, postgres: PostgresServer, tmp_path: Path
) -> None:
    dsn = postgres.database()
    secret = new_secret()
    receiver = await Receiver(secret).start()
    base = f"http://127.0.0.1:{receiver.port}"
    config_a, port_a = _config(tmp_path / "a", triton_server.grpc_url, dsn, f"{base}/a", secret)
    config_b, port_b = _config(tmp_path / "b", triton_server.grpc_url, dsn, f"{base}/b", secret)
    up, double = 'lpr_camera_up{camera="yard"}', 'lpr_camera_double_run{camera="yard"}'
    a, b = _start(config_a), _start(config_b)  # neither given --shard: no leases
    try:
        both = await until(lambda: _gauge(port_a, up) == 1 == _gauge(port_b, up), 120, "both up")
        found = await until(
            lambda: _gauge(port_a, double) == 1 == _gauge(port_b, double), 30, "both told"
        )
        print(f"double run found {found:.1f} s after both ran it (both up after {both:.1f} s)")
        assert found <= 2 * 3 + 1  # two renewals of 3 s (TTL 15 s / 5), and a scrape
    finally:
        err_a, err_b = _stop(a), _stop(b)
        await receiver.stop()
    assert "runs it too" in err_a and "runs it too" in err_b, (err_a[-2000:], err_b[-2000:])
