"""The history as a consumer of the event log, on real parts: a SQLite history locked by
another process, and a PostgreSQL history stopped under two real-time cameras. Meanwhile the
webhook receiver gets every event at once; afterwards the history has every event, once. A
stale lease holder's event is the history's one dead letter.

``LPR_TEST_LOCK_S`` (20) and ``LPR_TEST_PG_DOWN_S`` (25) set how long each outage lasts."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from converters import assets
from streamer.app import Service
from streamer.config import OutboxConfig, StorageConfig, load_config
from streamer.delivery.consumers import Consumers, Progress
from streamer.delivery.events import LeaseStamp, utc_iso
from streamer.delivery.webhook_delivery import WebhookPoster
from streamer.foundation.metrics import Metrics
from streamer.pipeline.leases import CameraLeases
from streamer.store.base import open_event_store
from streamer.store.history_delivery import HistoryDeliverer
from streamer.store.sqlite import SQLiteEventStore
from tests.postgres_server import PostgresServer
from tests.streamer.delivery.webhook_setup import FAST, target
from tests.webhook_receiver import Receiver, eventually, make_event, new_secret

LOCK_S = float(os.environ.get("LPR_TEST_LOCK_S", "20"))
PG_DOWN_S = float(os.environ.get("LPR_TEST_PG_DOWN_S", "25"))
CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())

#: Another process holds the history's write lock for a while (a backup, a stuck tool).
HOLD_LOCK = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("ROLLBACK")
"""


async def test_a_locked_sqlite_history_delays_only_itself(
    tmp_path: Path, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    store = await SQLiteEventStore.open(tmp_path / "events.sqlite3")
    webhook = WebhookPoster(target("rx", receiver.url, receiver.secret), metrics)
    consumers = await Consumers.open(
        OutboxConfig(path=tmp_path / "outbox.sqlite3"),
        [HistoryDeliverer(store, metrics), webhook],
        metrics,
        **FAST,
    )
    # Two a second, ending 2 s before the lock does.
    events = [make_event("gate" if i % 2 else "yard") for i in range(int(LOCK_S * 2) - 4)]
    appended: dict[str, float] = {}
    try:
        locker = await asyncio.create_subprocess_exec(
            sys.executable, "-c", HOLD_LOCK, str(tmp_path / "events.sqlite3"), str(LOCK_S),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert locker.stdout is not None and await locker.stdout.readline() == b"locked\n"
        time.monotonic()
        with caplog.at_level(logging.WARNING):
            for event in events:  # two a second while the history is locked
                await consumers.append(event)
                appended[event.message_id] = time.monotonic()
                await asyncio.sleep(0.5)
            assert locker.returncode is None, "the lock went before the last event"
            history = consumers.worker("history")
            assert history is not None and history.delivered == 0  # locked throughout
            await asyncio.wait_for(locker.wait(), LOCK_S + 30)
            progress = await consumers.wait_caught_up(60)
        assert progress["history"].pending == 0 and progress["history"].delivered == len(events)
        late = {r.webhook_id: r.at - appended[r.webhook_id] for r in receiver.delivered()}
        assert set(late) == set(appended)
        assert max(late.values()) < 2.0, late  # every event at the receiver within 2 s
        print(f"history locked {LOCK_S:g} s: {len(events)} events, the receiver's slowest "
              f"{max(late.values()):.3f} s after its commit")  # fmt: skip
        for event in events:
            kept = await store.get(event.event_id)
            assert kept is not None and kept.payload["text"] == event.text
        assert not [r for r in caplog.records if "lost" in r.getMessage().lower()]
    finally:
        await consumers.close()
        await store.close()


def _two_cameras(triton_url: str, dsn: str, receiver_url: str, secret: str) -> str:
    cameras = "".join(
        f"  - {{name: {name}, url: '{CLIP}', sample_fps: 5, realtime: true}}\n"
        for name in ("east", "west")
    )
    return (
        f"cameras:\n{cameras}triton: {{url: '{triton_url}'}}\n"
        "events: {stdout: false, dedup_window_s: 0}\n"
        "metrics: {enabled: false}\nweb: {enabled: false}\n"
        f"storage: {{backend: postgresql, dsn: '{dsn}'}}\n"
        f"webhooks:\n  - {{name: rx, url: '{receiver_url}', secret: '{secret}'}}\n"
    )


async def test_postgresql_stopped_under_two_cameras_loses_no_event(
    tmp_path: Path, triton_server: object
) -> None:
    secret = new_secret()
    receiver = await Receiver(secret).start()
    server = PostgresServer(tmp_path / "pg").start()
    try:
        path = tmp_path / "site.yaml"
        url = triton_server.grpc_url  # type: ignore[attr-defined]
        path.write_text(_two_cameras(url, server.database(), receiver.url, secret))
        service = Service(load_config(path))
        run = asyncio.create_task(service.run())
        try:
            await eventually(lambda: service.events_emitted >= 2, 90, "the first events")
            await asyncio.to_thread(server.stop)
            down_at = service.events_emitted
            await asyncio.sleep(PG_DOWN_S)
            during = service.events_emitted - down_at
            await asyncio.to_thread(server.resume)
            await asyncio.sleep(5)
            assert service.consumers is not None
            progress = await service.consumers.wait_caught_up(90)
            # Every message committed so far (the cameras go on: later ones are not counted).
            committed = _messages(tmp_path / "data" / "outbox.sqlite3")
            store = service.store
            assert store is not None
            kept = set()
            for pass_id in {message.split(".v")[0] for message in committed}:
                stored = await store.get(pass_id)
                assert stored is not None, pass_id
                kept |= {
                    pass_id if v["version"] == 1 else f"{pass_id}.v{v['version']}"
                    for v in stored.versions
                }
        finally:
            service.request_stop()
            await asyncio.wait_for(run, 60)
    finally:
        await receiver.stop()
        server.close()
    assert during >= 2, "no event was decided while PostgreSQL was down"
    print(f"PostgreSQL down {PG_DOWN_S:g} s: {during} events decided meanwhile, "
          f"{len(committed)} committed, each in the history and at the receiver")  # fmt: skip
    assert progress["history"].pending == 0 and progress["rx"].pending == 0
    assert committed <= kept  # every one in the history...
    assert committed <= set(receiver.delivered_ids())  # ...and at the receiver
    duplicates = [i for i in receiver.delivered_ids() if receiver.delivered_ids().count(i) > 1]
    assert not duplicates  # each once (a re-send would have the same id)


def _messages(outbox: Path) -> set[str]:
    with sqlite3.connect(outbox) as db:
        return {str(row[0]) for row in db.execute("SELECT event_id FROM events")}


async def test_the_log_lets_the_vehicle_picture_go_once_the_history_has_it(
    tmp_path: Path, receiver: Receiver
) -> None:
    """The picture of the vehicle is in the log only until the history took it (the log
    keeps the crop, which receivers' crop_url may still need)."""
    metrics = Metrics()
    store = await SQLiteEventStore.open(tmp_path / "events.sqlite3")
    webhook = WebhookPoster(target("rx", receiver.url, receiver.secret), metrics)
    consumers = await Consumers.open(
        OutboxConfig(path=tmp_path / "outbox.sqlite3"),
        [HistoryDeliverer(store, metrics), webhook],
        metrics,
        **FAST,
    )
    event = dataclasses.replace(make_event(), frame_jpeg=b"\xff\xd8 the vehicle")
    try:
        await consumers.append(event)
        assert (await consumers.wait_caught_up(10))["history"].delivered == 1
        assert await store.frame(event.event_id) == event.frame_jpeg
        outbox = tmp_path / "outbox.sqlite3"
        with sqlite3.connect(outbox) as db:
            frame, crop = db.execute("SELECT frame, crop FROM events").fetchone()
        assert frame is None and crop == event.crop_jpeg
    finally:
        await consumers.close()
        await store.close()


async def test_a_stale_lease_holders_event_is_a_dead_letter_of_the_history(
    tmp_path: Path, postgres: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """An event decided under a lease another replica had taken by then is refused by the
    PostgreSQL history for good: a dead letter, not retried; the events around it are kept."""
    dsn = postgres.database()
    metrics = Metrics()
    store = await open_event_store(StorageConfig(backend="postgresql", dsn=dsn))
    old_holder, new_holder = (CameraLeases(dsn, "db", 3.0, holder=h) for h in ("old", "new"))
    await old_holder.connect()
    await new_holder.connect()
    consumers = await Consumers.open(
        OutboxConfig(path=tmp_path / "outbox.sqlite3"),
        [HistoryDeliverer(store, metrics)],
        metrics,
        **FAST,
    )
    try:
        assert await old_holder.take("yard")
        old = old_holder.token("yard")
        assert old is not None
        before = LeaseStamp(old, utc_iso(time.time()))
        await asyncio.sleep(0.05)
        await old_holder.release("yard")
        assert await new_holder.take("yard")
        await asyncio.sleep(0.05)
        after = LeaseStamp(old, utc_iso(time.time()))
        kept, stale, next_one = (
            dataclasses.replace(make_event("yard"), lease=lease) for lease in (before, after, None)
        )
        with caplog.at_level(logging.WARNING):
            for event in (kept, stale, next_one):
                await consumers.append(event)
            progress = await consumers.wait_caught_up(20)
        assert progress["history"] == Progress(delivered=2, dead=1, pending=0)
        assert await store.get(kept.event_id) is not None
        assert await store.get(next_one.event_id) is not None
        assert await store.get(stale.event_id) is None
        (letter,) = await consumers.outbox.dead_letters("history")
        assert letter.event_id == stale.event_id and letter.attempts == 1
        assert "a stale holder's event, refused" in letter.reason
        assert any("dead letter" in r.getMessage() for r in caplog.records)
        assert metrics.consumer_deliveries.labels("history", "dead")._value.get() == 1
    finally:
        await consumers.close()
        await store.close()
        await old_holder.close()
        await new_holder.close()
