"""The event history on both backends, the same tests: a real SQLite file
(streamer/store/sqlite.py) and a real PostgreSQL server (streamer/store/postgresql.py,
tests/postgres_server.py): what is kept, across a reopening; search; cursor pages while
events keep arriving; retention and erasure."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import cv2
import numpy as np
import pytest

from streamer.config import StorageConfig
from streamer.delivery.events import PlateEvent, build_event
from streamer.store.base import CursorError, EventQuery, open_event_store
from streamer.store.retention import keep_within_retention
from streamer.tracking.known_plates import Match
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
