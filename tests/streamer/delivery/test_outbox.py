"""The SQLite outbox on its own: durability, per-camera order, retries, dead letters,
pruning, statistics, and loud database errors."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streamer.delivery.outbox import Outbox, OutboxError
from streamer.ops.metrics import Metrics
from tests.webhook_receiver import make_event


@pytest.fixture
async def outbox(tmp_path: Path) -> AsyncIterator[Outbox]:
    box = await Outbox.open(tmp_path / "data" / "outbox.sqlite3", ["a", "b"], metrics=Metrics())
    try:
        yield box
    finally:
        await box.close()


def count(metrics: Metrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name)
    return 0.0 if value is None else value


async def test_open_creates_the_folder_in_wal_mode_with_full_sync(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "outbox.sqlite3"
    box = await Outbox.open(path, ["a"])
    threads: list[str] = []
    modes = await box._call(
        lambda c: (
            threads.append(threading.current_thread().name),
            c.execute("PRAGMA journal_mode").fetchone()[0],
            c.execute("PRAGMA synchronous").fetchone()[0],
        ),
        "test",
    )
    await box.close()
    await box.close()  # idempotent
    assert path.is_file()
    assert modes[1:] == ("wal", 2)  # 2: FULL
    assert threads[0].startswith("outbox-db") and threads[0] != threading.current_thread().name


async def test_add_is_committed_when_it_returns(outbox: Outbox) -> None:
    event = make_event("gate")
    assert await outbox.add(event) is True
    # Another connection (another process, after a crash) sees it at once.
    with sqlite3.connect(outbox.path) as other:
        (payload,) = other.execute(
            "SELECT payload FROM events WHERE event_id = ?", (event.event_id,)
        ).fetchone()
        states = other.execute(
            "SELECT target, state FROM deliveries WHERE event_id = ? ORDER BY target",
            (event.event_id,),
        ).fetchall()
    assert json.loads(payload) == event.to_dict(include_crop=False)
    assert states == [("a", "pending"), ("b", "pending")]
    assert await outbox.crop(event.event_id) == event.crop_jpeg
    assert await outbox.add(event) is False  # the same event again: nothing new


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


async def test_open_without_create_needs_the_file(tmp_path: Path) -> None:
    with pytest.raises(OutboxError, match="no outbox at"):
        await Outbox.open(tmp_path / "missing.sqlite3", ["a"], create=False)
    assert not (tmp_path / "missing.sqlite3").exists()


async def test_a_full_disk_is_loud(
    tmp_path: Path, outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = outbox._metrics
    assert metrics is not None
    await outbox.add(make_event())
    # Test hook: cap the database at its current size, so the next growth fails
    # exactly like a full disk (SQLITE_FULL, "database or disk is full").
    pages = await outbox._call(lambda c: c.execute("PRAGMA page_count").fetchone()[0], "test")
    await outbox._call(lambda c: c.execute(f"PRAGMA max_page_count={pages}"), "test")
    big = make_event()
    big = type(big)(**{**big.__dict__, "crop_jpeg": b"\xff" * 200_000})
    assert outbox.healthy
    with (
        caplog.at_level(logging.ERROR, logger="streamer.delivery.outbox"),
        pytest.raises(OutboxError, match="database or disk is full"),
    ):
        await outbox.add(big)
    assert not outbox.healthy
    assert "database or disk is full" in (outbox.last_error or "")
    assert count(metrics, "lpr_outbox_errors_total") == 1
    assert any(
        r.levelno == logging.ERROR and "disk is full" in r.getMessage() for r in caplog.records
    )
    # Nothing half-written: the failed transaction was rolled back.
    assert await outbox.crop(big.event_id) is None
    assert (await outbox.stats("a")).depth == 1

    # Space again: the next write succeeds and readiness comes back.
    await outbox._call(lambda c: c.execute("PRAGMA max_page_count=1073741823"), "test")
    assert await outbox.add(big) is True
    assert outbox.healthy


async def test_a_read_only_database_is_loud(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite3"
    box = await Outbox.open(path, ["a"])
    await box.close()
    metrics = Metrics()
    box = await Outbox.open(path, ["a"], metrics=metrics)
    try:
        await box._call(lambda c: c.execute("PRAGMA query_only=1"), "test")
        with pytest.raises(OutboxError, match=r"readonly|read-only|query_only"):
            await box.add(make_event())
        assert not box.healthy and count(metrics, "lpr_outbox_errors_total") == 1
    finally:
        await box.close()


def _remove(path: Path, replace: bool) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    if replace:
        path.write_bytes(b"")  # another file under the same name


@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_an_outbox_deleted_or_replaced_while_open_is_loud(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "outbox.sqlite3"
    metrics = Metrics()
    box = await Outbox.open(path, ["a"], metrics=metrics)
    try:
        assert await box.add(make_event()) is True
        await asyncio.to_thread(_remove, path, how == "replaced")
        with (
            caplog.at_level(logging.ERROR, logger="streamer.delivery.outbox"),
            pytest.raises(OutboxError, match="was deleted or replaced while the service runs"),
        ):
            await box.add(make_event())
        assert not box.healthy and count(metrics, "lpr_outbox_errors_total") == 1
        assert any("deleted or replaced" in r.getMessage() for r in caplog.records)
    finally:
        await box.close()


async def test_an_unopenable_path_is_an_outbox_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OutboxError, match="cannot create the folder"):
        await Outbox.open(blocker / "outbox.sqlite3", ["a"])
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(OutboxError):
        await Outbox.open(garbage, ["a"])


async def test_closed_outbox_refuses_work(tmp_path: Path) -> None:
    box = await Outbox.open(tmp_path / "o.sqlite3", ["a"])
    await box.close()
    with pytest.raises(RuntimeError, match="closed"):
        await box.add(make_event())
