"""The event history on both backends, the same tests: a real SQLite file
(streamer/store/sqlite.py) and a real PostgreSQL server (streamer/store/postgresql.py,
tests/postgres_server.py): what is kept, across a reopening; search; cursor pages while
events keep arriving; retention and erasure; withheld passes kept apart; a SQLite file of
schema 1 migrated."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import uuid
from datetime import datetime
from pathlib import Path

import cv2
import numpy as np
import pytest

from streamer.config import StorageConfig
from streamer.delivery.events import PlateEvent, build_event
from streamer.domain.known_plates import Match
from streamer.domain.plate_pass import WithheldReason
from streamer.store.base import CursorError, EventQuery, open_event_store
from streamer.store.retention import keep_within_retention
from streamer.store.sqlite import SQLiteEventStore
from tests.plate_passes import a_pass

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


async def _event(
    text: str = "O567AM76",
    *,
    camera: str = "gate",
    at: float = T0,
    version: int = 1,
    event_id: str | None = None,
    match: Match | None = None,
    frame_max_width: int | None = 320,
    withheld: WithheldReason | None = None,
) -> PlateEvent:
    base = a_pass(version=version, match=match)
    first_seen = dataclasses.replace(base.first_seen, camera=camera, wall_time=at)
    plate_pass = dataclasses.replace(
        base,
        camera=camera,
        text=text,
        event_id=event_id or str(uuid.uuid4()),
        first_seen=first_seen,
        voted_text=None,
        withheld=withheld,
    )
    return await build_event(plate_pass, 80, frame_max_width)


def _texts(page_events: list) -> list[str]:  # type: ignore[type-arg]
    return [e.payload["text"] for e in page_events]


async def test_events_and_their_pictures_survive_reopening(storage: StorageConfig) -> None:
    store = await open_event_store(storage)
    first, second = await _event("O567AM76"), await _event("Y836XH76", frame_max_width=None)
    await store.add(first)
    await store.add(second)
    await store.close()

    store = await open_event_store(storage)
    try:
        found = await store.get(first.event_id)
        assert found is not None and found.payload["text"] == "O567AM76" and found.has_frame
        assert found.payload["first_seen"]["utc"] == "2026-01-01T00:00:00.000+00:00"
        assert await store.crop(first.event_id) == first.crop_jpeg
        frame = await store.frame(first.event_id)
        assert frame is not None and frame == first.frame_jpeg
        picture = cv2.imdecode(np.frombuffer(frame, np.uint8), cv2.IMREAD_COLOR)
        assert picture is not None and picture.shape[1] <= 320
        assert await store.frame(second.event_id) is None  # none was made
        assert (await store.get(second.event_id)).has_frame is False  # type: ignore[union-attr]
        assert await store.get(str(uuid.uuid4())) is None
        assert _texts((await store.search(EventQuery())).events) == ["Y836XH76", "O567AM76"]
    finally:
        await store.close()


async def test_a_correction_replaces_the_text_and_every_version_is_kept(
    storage: StorageConfig,
) -> None:
    store = await open_event_store(storage)
    try:
        event_id = str(uuid.uuid4())
        wrong = await _event("C567AM76", event_id=event_id)
        right = await _event("O567AM76", event_id=event_id, version=2)
        await store.add(wrong)
        await store.add(right)
        await store.add(wrong)  # a late first version changes nothing
        assert _texts((await store.search(EventQuery(plate="O567AM76"))).events) == ["O567AM76"]
        assert (await store.search(EventQuery(plate="C567AM76"))).events == []
        stored = await store.get(event_id)
        assert stored is not None and stored.payload["version"] == 2
        assert [v["text"] for v in stored.versions] == ["C567AM76", "O567AM76"]
        assert await store.crop(event_id) == right.crop_jpeg
        late = dataclasses.replace(wrong, crop_jpeg=b"late first version's crop")
        await store.add(late)
        assert await store.crop(event_id) == right.crop_jpeg  # the newest version's picture
    finally:
        await store.close()


async def test_search_by_plate_exact_prefix_fuzzy_and_filters_combined(
    storage: StorageConfig,
) -> None:
    staff = Match("staff", "O567AM76", 0, False, False)
    banned = Match("banned", "A123BC77", 0, True, False)
    store = await open_event_store(storage)
    try:
        for event in [
            await _event("O567AM76", camera="gate", at=T0, match=staff),
            await _event("O567AM77", camera="yard", at=T0 + 60),
            await _event("Y836XH76", camera="yard", at=T0 + 120),
            await _event("A123BC77", camera="gate", at=T0 + 180, match=banned),
            await _event("O567AM76", camera="yard", at=T0 + 240),
        ]:
            await store.add(event)

        async def texts(**criteria: object) -> list[str]:
            return _texts((await store.search(EventQuery(**criteria))).events)  # type: ignore[arg-type]

        assert await texts(plate="O567AM76") == ["O567AM76", "O567AM76"]
        assert await texts(plate="o567 am76") == ["O567AM76", "O567AM76"]  # as a user types it
        assert await texts(plate="O567AM7") == []
        assert await texts(plate="O567", prefix=True) == ["O567AM76", "O567AM77", "O567AM76"]
        assert await texts(plate="O567AM7", fuzzy=True) == ["O567AM76", "O567AM77", "O567AM76"]
        assert await texts(plate="0567AM76", fuzzy=True) == ["O567AM76", "O567AM76"]  # 0 for O
        assert await texts(plate="Y836XH7", fuzzy=True, camera="gate") == []
        assert await texts(camera="gate") == ["A123BC77", "O567AM76"]
        assert await texts(after=T0 + 60, before=T0 + 180) == ["Y836XH76", "O567AM77"]
        assert await texts(plate="O567AM76", camera="yard", after=T0 + 1) == ["O567AM76"]
        assert await texts(label="staff") == ["O567AM76"]
        assert await texts(alert=True) == ["A123BC77"]
        assert len(await texts(alert=False)) == 4
        # A plate first seen after a fuzzy search is found by the next one.
        await store.add(await _event("O567AM78", camera="gate", at=T0 + 300))
        assert await texts(plate="O567AM7", fuzzy=True) == [
            "O567AM78",
            "O567AM76",
            "O567AM77",
            "O567AM76",
        ]
        assert await store.erase(plate="O567AM78") == 1
        assert await texts(plate="O567AM78", fuzzy=True) == ["O567AM76", "O567AM77", "O567AM76"]
    finally:
        await store.close()


async def test_cursor_pages_give_every_event_once_while_new_ones_arrive(
    storage: StorageConfig,
) -> None:
    store = await open_event_store(storage)
    try:
        before = [await _event(f"A{i:03d}BC77", at=T0 + i) for i in range(25)]
        for event in before:
            await store.add(event)
        seen: list[str] = []
        cursor = None
        while True:
            page = await store.search(EventQuery(limit=10, cursor=cursor))
            seen += [e.event_id for e in page.events]
            for i in range(3):  # arrivals between two pages: newer than any page's cursor
                await store.add(await _event("Y836XH76", at=T0 + 100 + i))
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == [e.event_id for e in reversed(before)]  # each once, newest first
        with pytest.raises(CursorError):
            await store.search(EventQuery(cursor="not-a-cursor"))
    finally:
        await store.close()


async def test_retention_deletes_old_events_and_every_trace_of_them(
    storage: StorageConfig,
) -> None:
    path = storage.path
    staff = Match("staff", "B840CK197", 0, False, False)
    store = await open_event_store(storage)
    day = 86_400.0
    try:
        old = await _event("H123XX77", at=T0 - 40 * day)
        kept_by_label = await _event("B840CK197", at=T0 - 40 * day, match=staff)
        recent = await _event("Y836XH76", at=T0 - day)
        for event in (old, kept_by_label, recent):
            await store.add(event)
        deleted = await store.prune(
            now=T0, retention_s=30 * day, by_label={"staff": 365 * day}, max_bytes=10**9
        )
        assert deleted == 1
        assert await store.get(old.event_id) is None
        assert await store.crop(old.event_id) is None and await store.frame(old.event_id) is None
        assert _texts((await store.search(EventQuery())).events) == ["Y836XH76", "B840CK197"]
        if storage.backend == "sqlite":  # not in a free page, nor the WAL
            for file in (path, path.with_name(path.name + "-wal")):
                assert not file.exists() or b"H123XX77" not in file.read_bytes(), file
        # Over the size cap: the oldest go first, whatever their label.
        assert await store.prune(now=T0, retention_s=30 * day, by_label={}, max_bytes=1) == 2
        assert (await store.search(EventQuery())).events == []
    finally:
        await store.close()


async def test_the_history_part_prunes_on_its_interval(storage: StorageConfig) -> None:
    store = await open_event_store(storage)
    config = storage.model_copy(update={"retention_days": 1, "prune_interval_s": 0.1})
    clock = [T0]
    part = asyncio.create_task(keep_within_retention(store, config, lambda: clock[0]))
    try:
        event = await _event("H123XX77", at=T0)
        await store.add(event)
        await asyncio.sleep(0.3)
        assert await store.get(event.event_id) is not None
        clock[0] = T0 + 2 * 86_400  # two days later
        for _ in range(50):
            if await store.get(event.event_id) is None:
                break
            await asyncio.sleep(0.1)
        assert await store.get(event.event_id) is None
    finally:
        part.cancel()
        await asyncio.gather(part, return_exceptions=True)
        await store.close()


async def test_withheld_passes_are_kept_apart_and_found_when_asked_for(
    storage: StorageConfig,
) -> None:
    day = 86_400.0
    reported = await _event("O567AM76", camera="gate", at=T0)
    unsure = await _event("O567AM77", camera="yard", at=T0 + 60, withheld="low_confidence")
    glimpse = await _event(
        "Y836XH76", camera="gate", at=T0 + 120, withheld="few_reads", frame_max_width=None
    )
    assert unsure.type == "plate.withheld"
    store = await open_event_store(storage)
    try:
        for event in (reported, unsure, glimpse):
            await store.add(event)

        async def texts(**criteria: object) -> list[str]:
            return _texts((await store.search(EventQuery(**criteria))).events)  # type: ignore[arg-type]

        assert await texts() == ["O567AM76"]  # by default: the reported passes, as before
        assert await texts(withheld=False) == ["O567AM76"]
        assert await texts(withheld=True) == ["Y836XH76", "O567AM77"]
        assert await texts(withheld=None) == ["Y836XH76", "O567AM77", "O567AM76"]
        # With every other criterion, fuzzy and prefix included.
        assert await texts(plate="O567AM7", fuzzy=True) == ["O567AM76"]
        assert await texts(plate="O567AM7", fuzzy=True, withheld=True) == ["O567AM77"]
        assert await texts(plate="O567", prefix=True, withheld=None) == ["O567AM77", "O567AM76"]
        assert await texts(camera="gate", withheld=True) == ["Y836XH76"]
        assert await texts(plate="Y836XH76") == []
        assert await texts(after=T0 + 30, withheld=None) == ["Y836XH76", "O567AM77"]
        # Pages of withheld passes.
        page = await store.search(EventQuery(withheld=True, limit=1))
        rest = await store.search(EventQuery(withheld=True, limit=1, cursor=page.next_cursor))
        assert _texts(page.events + rest.events) == ["Y836XH76", "O567AM77"]
        assert rest.next_cursor is None
        # One pass, as any: payload, versions, pictures.
        stored = await store.get(unsure.event_id)
        assert stored is not None and stored.has_frame
        assert stored.payload["type"] == "plate.withheld"
        assert stored.payload["withheld"] == "low_confidence"
        assert [(v["type"], v["withheld"]) for v in stored.versions] == [
            ("plate.withheld", "low_confidence")
        ]
        assert await store.crop(unsure.event_id) == unsure.crop_jpeg
        assert await store.frame(unsure.event_id) == unsure.frame_jpeg
    finally:
        await store.close()

    store = await open_event_store(storage)  # kept across a reopening, still apart
    try:
        assert _texts((await store.search(EventQuery())).events) == ["O567AM76"]
        assert _texts((await store.search(EventQuery(withheld=True))).events) == [
            "Y836XH76",
            "O567AM77",
        ]
        # Erased like any pass: by plate, by id.
        assert await store.erase(plate="y836 xh76") == 1
        assert await store.get(glimpse.event_id) is None
        assert await store.crop(glimpse.event_id) is None
        assert await store.erase(event_id=unsure.event_id) == 1
        assert (
            await store.get(unsure.event_id) is None and await store.frame(unsure.event_id) is None
        )
        assert (await store.search(EventQuery(withheld=True))).events == []
        near = await store.search(EventQuery(plate="O567AM77", fuzzy=True, withheld=None))
        assert [e.event_id for e in near.events] == [reported.event_id]  # the erased one gone
        if storage.backend == "sqlite":
            path = storage.path
            for file in (path, path.with_name(path.name + "-wal")):
                assert not file.exists() or b"Y836XH76" not in file.read_bytes(), file
        # Pruned like any pass.
        old = await _event("H123XX77", at=T0 - 40 * day, withheld="few_reads")
        await store.add(old)
        assert await store.prune(now=T0, retention_s=30 * day, by_label={}, max_bytes=10**9) == 1
        assert await store.get(old.event_id) is None
        assert _texts((await store.search(EventQuery(withheld=None))).events) == ["O567AM76"]
    finally:
        await store.close()


#: The history's tables as schema 1 created them, verbatim (streamer/store/sqlite.py).
#: A frozen copy on purpose, not an import: the migration must keep reading what old
#: releases wrote, whatever the module's own DDL becomes.
SQLITE_SCHEMA_1 = """
CREATE TABLE IF NOT EXISTS passes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    camera TEXT NOT NULL,
    text TEXT NOT NULL,
    label TEXT,
    alert INTEGER NOT NULL DEFAULT 0,
    first_seen REAL NOT NULL,
    version INTEGER NOT NULL,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (
    event_id TEXT NOT NULL REFERENCES passes(event_id) ON DELETE CASCADE,
    version INTEGER NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (event_id, version)
);
CREATE TABLE IF NOT EXISTS pictures (
    event_id TEXT PRIMARY KEY REFERENCES passes(event_id) ON DELETE CASCADE,
    crop BLOB NOT NULL,
    frame BLOB
);
CREATE INDEX IF NOT EXISTS passes_by_time ON passes(first_seen);
CREATE INDEX IF NOT EXISTS passes_by_camera ON passes(camera, seq);
CREATE INDEX IF NOT EXISTS passes_by_text ON passes(text);
CREATE INDEX IF NOT EXISTS passes_by_label ON passes(label, seq);
"""


def v1_row(event: PlateEvent) -> tuple[object, ...]:
    """``event`` as a row of schema 1's ``passes`` (event_id, camera, text, label, alert,
    first_seen, version, payload)."""
    return (
        event.event_id,
        event.camera,
        event.text,
        event.match["label"] if event.match else None,
        event.alert,
        datetime.fromisoformat(event.first_seen.utc).timestamp(),
        event.version,
        json.dumps(event.to_dict(include_crop=False)),
    )


async def test_a_sqlite_history_of_schema_1_is_migrated_keeping_its_passes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.sqlite3"
    old = await _event("O567AM76", at=T0)
    with sqlite3.connect(path) as db:
        db.executescript(f"PRAGMA journal_mode=WAL;{SQLITE_SCHEMA_1}PRAGMA user_version=1;")
        db.execute(
            "INSERT INTO passes (event_id, camera, text, label, alert, first_seen, version, "
            "payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            v1_row(old),
        )
        db.execute(
            "INSERT INTO versions (event_id, version, payload) VALUES (?, 1, ?)",
            (old.event_id, v1_row(old)[-1]),
        )
        db.execute(
            "INSERT INTO pictures (event_id, crop, frame) VALUES (?, ?, ?)",
            (old.event_id, old.crop_jpeg, old.frame_jpeg),
        )
    db.close()

    store = await SQLiteEventStore.open(path)
    try:
        # The pass of schema 1 is a reported one.
        assert [e.event_id for e in (await store.search(EventQuery())).events] == [old.event_id]
        assert (await store.search(EventQuery(withheld=True))).events == []
        stored = await store.get(old.event_id)
        assert stored is not None and stored.payload["type"] == "plate" and stored.has_frame
        assert await store.crop(old.event_id) == old.crop_jpeg
        withheld = await _event("O567AM77", at=T0 + 1, withheld="few_reads")
        await store.add(withheld)
        assert _texts((await store.search(EventQuery(withheld=True))).events) == ["O567AM77"]
        assert _texts((await store.search(EventQuery())).events) == ["O567AM76"]
    finally:
        await store.close()
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2
        rows = db.execute("SELECT text, withheld FROM passes ORDER BY seq").fetchall()
        assert rows == [("O567AM76", 0), ("O567AM77", 1)]
        indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert {"passes_reported", "passes_withheld"} <= indexes
        plan = " ".join(
            str(r[3])
            for r in db.execute(
                "EXPLAIN QUERY PLAN SELECT seq FROM passes p WHERE p.withheld "
                "ORDER BY p.seq DESC LIMIT 5"
            )
        )
        assert "passes_withheld" in plan  # a page of withheld passes reads only them
    finally:
        db.close()
    store = await SQLiteEventStore.open(path)  # opened again: nothing left to migrate
    try:
        assert len((await store.search(EventQuery(withheld=None))).events) == 2
    finally:
        await store.close()
