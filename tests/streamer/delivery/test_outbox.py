"""The SQLite outbox on its own: durability, its database thread, two processes on one
file, and loud database errors (full disk, read-only, deleted or replaced, unopenable)."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
from pathlib import Path

import pytest

from streamer.delivery.outbox import Outbox, OutboxError
from streamer.foundation.metrics import Metrics
from tests.webhook_receiver import make_event


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


async def test_outbox_is_shared_between_two_processes_safely(tmp_path: Path) -> None:
    """The CLI (another connection) and the service's outbox at once: WAL, no lock errors."""
    path = tmp_path / "outbox.sqlite3"
    first = await Outbox.open(path, ["a"])
    second = await Outbox.open(path, ["a"], create=False)
    try:
        events = [make_event() for _ in range(20)]
        await asyncio.gather(
            *(first.add(e) for e in events[:10]), *(second.add(e) for e in events[10:])
        )
        assert (await first.stats("a")).depth == 20
        for e in events:
            await second.mark_dead(e.event_id, "a", "HTTP 400")
        assert await first.redrive() == 20
    finally:
        await first.close()
        await second.close()
