"""What the outbox stores and how it is read (streamer/delivery/outbox_sql.py), through
the outbox: per-camera order, retries, dead letters and re-drive, statistics, pruning,
state across a reopening and targets no longer configured."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import time
from pathlib import Path

from streamer.delivery.outbox import Outbox
from tests.webhook_receiver import make_event


async def test_next_batch_gives_each_cameras_oldest_pending_event(outbox: Outbox) -> None:
    g1, y1, g2, y2, g3 = (make_event(c) for c in ("gate", "yard", "gate", "yard", "gate"))
    for event in (g1, y1, g2, y2, g3):
        await outbox.add(event)
    batch = await outbox.next_batch("a", 10, with_crop=True)
    assert [d.event_id for d in batch] == [g1.event_id, y1.event_id]
    assert batch[0].payload["text"] == g1.text and batch[0].crop == g1.crop_jpeg
    assert (await outbox.next_batch("a", 10))[0].crop is None
    assert [d.event_id for d in await outbox.next_batch("a", 1)] == [g1.event_id]
    excluded = await outbox.next_batch("a", 10, exclude_cameras={"gate"})
    assert [d.event_id for d in excluded] == [y1.event_id]

    # g1 waits for a retry: gate's later events must wait too (per-camera order).
    await outbox.mark_retry(g1.event_id, "a", time.time() + 60, "HTTP 503: busy")
    assert [d.event_id for d in await outbox.next_batch("a", 10)] == [y1.event_id]
    due = await outbox.next_due("a", exclude_cameras={"yard"})
    assert due is not None and due > time.time() + 50
    # Target b has its own progress.
    assert [d.event_id for d in await outbox.next_batch("b", 10)] == [g1.event_id, y1.event_id]

    await outbox.mark_delivered(y1.event_id, "a")
    assert [d.event_id for d in await outbox.next_batch("a", 10)] == [y2.event_id]
    # A dead letter does not hold its camera up.
    await outbox.mark_retry(g1.event_id, "a", time.time(), "HTTP 503: busy")
    (head,) = [d for d in await outbox.next_batch("a", 10) if d.camera == "gate"]
    assert head.event_id == g1.event_id and head.attempts == 2
    await outbox.mark_dead(g1.event_id, "a", "HTTP 400: no")
    gate = [d for d in await outbox.next_batch("a", 10) if d.camera == "gate"]
    assert [d.event_id for d in gate] == [g2.event_id]
    assert await outbox.state(g1.event_id, "a") == "dead"
    assert await outbox.state(g1.event_id, "b") == "pending"


async def test_dead_letters_are_listed_and_redriven(outbox: Outbox) -> None:
    e1, e2, e3 = make_event("gate"), make_event("gate"), make_event("yard")
    for event in (e1, e2, e3):
        await outbox.add(event)
    await outbox.mark_dead(e1.event_id, "a", "HTTP 400: bad plate")
    await outbox.mark_dead(e2.event_id, "a", "HTTP 404: gone")
    await outbox.mark_dead(e2.event_id, "b", "HTTP 410: gone")
    dead = await outbox.dead_letters()
    assert [(d.event_id, d.target) for d in dead] == [
        (e1.event_id, "a"),
        (e2.event_id, "a"),
        (e2.event_id, "b"),
    ]
    assert dead[0].reason == "HTTP 400: bad plate" and dead[0].text == e1.text
    assert dead[0].camera == "gate" and dead[0].attempts == 1
    assert len(await outbox.dead_letters("b")) == 1
    assert (await outbox.stats("a")).dead == 2

    assert await outbox.redrive([e2.event_id], target="b") == 1
    assert await outbox.state(e2.event_id, "b") == "pending"
    assert await outbox.state(e2.event_id, "a") == "dead"
    assert await outbox.redrive(["not-there"]) == 0
    assert await outbox.redrive() == 2
    assert await outbox.dead_letters() == []
    heads = await outbox.next_batch("a", 10)
    assert heads[0].event_id == e1.event_id and heads[0].attempts == 0


async def test_stats_depth_and_oldest_age(outbox: Outbox) -> None:
    assert (await outbox.stats("a")).depth == 0
    assert (await outbox.stats("a")).oldest_age_s == 0.0
    first = make_event()
    await outbox.add(first)
    await asyncio.sleep(0.2)
    await outbox.add(make_event())
    stats = await outbox.stats("a")
    assert stats.depth == 2 and 0.2 <= stats.oldest_age_s < 5
    await outbox.mark_delivered(first.event_id, "a")
    stats = await outbox.stats("a")
    assert stats.depth == 1 and stats.oldest_age_s < 0.2
    assert (await outbox.stats("b")).depth == 2


async def test_prune_removes_only_old_delivered_events(outbox: Outbox) -> None:
    done, half, dead = make_event(), make_event(), make_event()
    for event in (done, half, dead):
        await outbox.add(event)
    for target in ("a", "b"):
        await outbox.mark_delivered(done.event_id, target)
        await outbox.mark_dead(dead.event_id, target, "HTTP 400")
    await outbox.mark_delivered(half.event_id, "a")  # still pending for b

    assert await outbox.prune(delivered_older_than=3600) == 0
    assert await outbox.crop(done.event_id) is not None
    await asyncio.sleep(0.05)
    assert await outbox.prune(delivered_older_than=0.01) == 1
    assert await outbox.crop(done.event_id) is None
    assert await outbox.crop(half.event_id) is not None  # b has yet to get it
    assert await outbox.state(half.event_id, "a") is None
    assert await outbox.state(half.event_id, "b") == "pending"
    assert len(await outbox.dead_letters()) == 2  # dead letters stay
    await outbox.mark_delivered(half.event_id, "b")
    await asyncio.sleep(0.05)
    assert await outbox.prune(delivered_older_than=0.01) == 1
    assert await outbox.crop(half.event_id) is None


async def test_state_survives_reopening_and_new_targets_start_empty(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite3"
    box = await Outbox.open(path, ["a"])
    first, second = make_event("gate"), make_event("gate")
    await box.add(first)
    await box.add(second)
    await box.mark_retry(first.event_id, "a", time.time() - 1, "timeout")
    await box.close()

    box = await Outbox.open(path, ["a", "new"])
    try:
        (head,) = await box.next_batch("a", 10)
        assert head.event_id == first.event_id and head.attempts == 1
        assert (await box.stats("new")).depth == 0  # only events added from now on
        assert await box.orphaned_targets() == {}
    finally:
        await box.close()
    box = await Outbox.open(path, ["other"])
    try:
        assert await box.orphaned_targets() == {"a": 2}
    finally:
        await box.close()


async def test_dead_letters_are_pruned_after_their_own_retention(outbox: Outbox) -> None:
    dead = make_event()
    await outbox.add(dead)
    for target in ("a", "b"):
        await outbox.mark_dead(dead.event_id, target, "HTTP 400")
    assert await outbox.prune(delivered_older_than=0, dead_older_than=3600) == 0
    await asyncio.sleep(0.05)
    assert await outbox.prune(delivered_older_than=3600, dead_older_than=0.01) == 1
    assert await outbox.dead_letters() == [] and await outbox.crop(dead.event_id) is None


async def test_a_backlog_over_its_bound_becomes_dead_letters_oldest_first(outbox: Outbox) -> None:
    events = [make_event() for _ in range(5)]
    for event in events:
        await outbox.add(event)
    assert await outbox.trim_pending("a", 3, "backlog over outbox.max_pending (3)") == 2
    dead = await outbox.dead_letters("a")
    assert [d.event_id for d in dead] == [e.event_id for e in events[:2]]
    assert dead[0].reason == "backlog over outbox.max_pending (3)"
    assert (await outbox.stats("a")).depth == 3 and (await outbox.stats("b")).depth == 5
    assert await outbox.trim_pending("a", 3, "again") == 0


def _v1_outbox(path: Path, event_id: str) -> None:
    """An outbox file as version 1 of the schema wrote it, with one event pending for ``a``
    (the CREATE statements are version 1's, verbatim)."""
    with sqlite3.connect(path) as db:
        db.executescript(
            """
            PRAGMA journal_mode=WAL;
            CREATE TABLE events (
                seq INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE,
                camera TEXT NOT NULL, created_at REAL NOT NULL, payload TEXT NOT NULL,
                crop BLOB NOT NULL);
            CREATE TABLE deliveries (
                event_id TEXT NOT NULL REFERENCES events(event_id) ON DELETE CASCADE,
                target TEXT NOT NULL, seq INTEGER NOT NULL, camera TEXT NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'dead')),
                attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at REAL NOT NULL,
                last_attempt_at REAL, last_error TEXT, delivered_at REAL,
                PRIMARY KEY (event_id, target));
            PRAGMA user_version=1;
            """
        )
        db.execute(
            "INSERT INTO events (event_id, camera, created_at, payload, crop) "
            "VALUES (?, 'gate', 0, '{\"text\": \"A001AA77\"}', x'ffd8')",
            (event_id,),
        )
        db.execute(
            "INSERT INTO deliveries (event_id, target, seq, camera, state, next_attempt_at) "
            "VALUES (?, 'a', 1, 'gate', 'pending', 0)",
            (event_id,),
        )


async def test_an_outbox_of_schema_1_is_brought_up_to_date_keeping_its_events(
    tmp_path: Path,
) -> None:
    path = tmp_path / "outbox.sqlite3"
    _v1_outbox(path, "kept")
    outbox = await Outbox.open(path, ["a"])
    try:
        (pending,) = await outbox.next_batch("a", 10, with_crop=True, with_frame=True)
        assert (pending.event_id, pending.crop, pending.frame) == ("kept", b"\xff\xd8", None)
        event = make_event()
        assert await outbox.add(dataclasses.replace(event, frame_jpeg=b"\xff\xd8vehicle"))
        assert await outbox.is_erased("kept") is False
    finally:
        await outbox.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2
