"""streamer.store.erasure on a real history, a real outbox and the recent events: every trace
of a plate goes, the audit line does not name it."""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from pathlib import Path

import pytest

from streamer.delivery.events import PlateEvent, build_event
from streamer.delivery.outbox import Outbox
from streamer.delivery.recent_events import RecentEvents
from streamer.domain.plate_pass import WithheldReason
from streamer.store import erasure
from streamer.store.base import EventQuery
from streamer.store.sqlite import SQLiteEventStore
from tests.plate_passes import a_pass

PLATE = "H123XX77"


async def _event(
    text: str,
    candidates: list[tuple[str, float]] | None = None,
    withheld: WithheldReason | None = None,
) -> PlateEvent:
    plate_pass = dataclasses.replace(
        a_pass(),
        text=text,
        event_id=str(uuid.uuid4()),
        candidates=candidates or [(text, 1.0)],
        withheld=withheld,
    )
    return await build_event(plate_pass, 80, 320)


def _holds(path: Path, text: str) -> bool:
    """Whether a SQLite file (or its WAL) still holds ``text`` anywhere, free pages included."""
    files = (path, path.with_name(path.name + "-wal"))
    return any(f.exists() and text.encode() in f.read_bytes() for f in files)


async def test_a_plate_is_erased_everywhere_and_the_audit_line_does_not_name_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever each consumer's state (delivered, pending, a dead letter, a row of a target
    no longer configured), every event of the plate leaves the log, and its passes are
    recorded as erased: a correction of one that comes later is refused."""
    store_path, outbox_path = tmp_path / "events.sqlite3", tmp_path / "outbox.sqlite3"
    store = await SQLiteEventStore.open(store_path)
    outbox = await Outbox.open(outbox_path, ["a", "b"])
    recent = RecentEvents()
    try:
        own = await _event(PLATE)  # delivered to both targets
        candidate = await _event("H128XX77", [("H128XX77", 0.6), (PLATE, 0.4)])  # delivered
        pending = await _event(PLATE)  # target b has not taken it yet
        dead = await _event(PLATE)  # a dead letter of a
        other = await _event("Y836XH76")
        for event in (own, candidate, pending, dead, other):
            await store.add(event)
            await outbox.add(event)
            recent.add(event)
        for event in (own, candidate, other):
            for target in ("a", "b"):
                await outbox.mark_delivered(event.message_id, target)
        await outbox.mark_delivered(pending.message_id, "a")
        await outbox.mark_dead(dead.message_id, "a", "HTTP 400")
        outbox.targets = ("a", "c")  # b removed by a reload: its rows stay
        removed = await _event(PLATE)
        await outbox.add(removed)

        with caplog.at_level(logging.WARNING, logger="streamer.store.erasure"):
            erased = await erasure.erase(
                plate="h123 xx77", store=store, outbox=outbox, recent=recent, trigger="test"
            )
        assert erased.to_dict() == {
            "history": 4,
            "outbox": 5,
            "open_passes": 0,
            "queued": 0,
            "recent": 4,
            "mqtt_retained": 0,
        }
        (audit,) = caplog.records
        assert "erasure of a plate (test): 4 pass(es) from the history" in audit.getMessage()
        assert PLATE not in audit.getMessage() and "H123" not in audit.getMessage()

        left = (await store.search(EventQuery())).events
        assert [e.event_id for e in left] == [other.event_id]
        assert not _holds(store_path, PLATE)
        assert not _holds(outbox_path, PLATE)
        for event in (own, candidate, pending, dead, removed):
            for target in ("a", "b", "c"):
                assert await outbox.state(event.message_id, target) is None
        assert await outbox.dead_letters() == []
        assert await outbox.state(other.message_id, "a") == "delivered"
        assert [e.event_id for e in recent.events] == [other.event_id]
        # A correction of an erased pass, decided later: refused by the log.
        correction = dataclasses.replace(pending, version=2, previous_text=PLATE)
        assert not await outbox.add(correction)
        assert await outbox.is_erased(pending.event_id)
        assert not _holds(outbox_path, PLATE)
    finally:
        await store.close()
        await outbox.close()


async def test_a_large_erasure_runs_in_batches_with_its_progress(tmp_path: Path) -> None:
    outbox = await Outbox.open(tmp_path / "outbox.sqlite3", ["a"])
    try:
        for _ in range(25):
            await outbox.add(await _event(PLATE))
        await outbox.add(await _event("Y836XH76"))
        seen: list[int] = []
        removed, passes = await outbox.erase(json.dumps(PLATE), batch=10, progress=seen.append)
        assert (removed, len(passes), seen) == (25, 25, [10, 20, 25])
        assert (await outbox.stats("a")).depth == 1
        # The checkpoint's cursor was read: the next write commits.
        assert await outbox.add(await _event("A001AA77"))
    finally:
        await outbox.close()


async def test_one_pass_is_erased_by_its_id(tmp_path: Path) -> None:
    store = await SQLiteEventStore.open(tmp_path / "events.sqlite3")
    try:
        first, second = await _event(PLATE), await _event(PLATE)
        await store.add(first)
        await store.add(second)
        erased = await erasure.erase(
            event_id=first.event_id, store=store, outbox=None, recent=None, trigger="test"
        )
        assert erased.history == 1
        assert await store.get(first.event_id) is None
        assert await store.get(second.event_id) is not None
        with pytest.raises(ValueError, match="letter or digit"):
            await erasure.erase(plate=" - ", store=store, outbox=None, recent=None, trigger="t")
    finally:
        await store.close()


async def test_withheld_passes_of_a_plate_are_erased_with_its_reported_ones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.sqlite3"
    store = await SQLiteEventStore.open(path)
    try:
        reported = await _event(PLATE)
        unsure = await _event(PLATE, withheld="low_confidence")
        glimpse = await _event("Y836XH76", candidates=[("Y836XH76", 0.6), (PLATE, 0.4)],
                               withheld="few_reads")  # fmt: skip
        other = await _event("O567AM76", withheld="few_reads")
        for event in (reported, unsure, glimpse, other):
            await store.add(event)
        erased = await erasure.erase(
            plate=PLATE.lower(), store=store, outbox=None, recent=None, trigger="test"
        )
        assert erased.history == 3  # the plate's text, or a candidate: withheld or not
        for gone in (reported, unsure, glimpse):
            assert await store.get(gone.event_id) is None
            assert await store.crop(gone.event_id) is None
        assert not _holds(path, PLATE)
        remaining = await store.search(EventQuery(withheld=None))
        assert [e.event_id for e in remaining.events] == [other.event_id]
        erased = await erasure.erase(
            event_id=other.event_id, store=store, outbox=None, recent=None, trigger="test"
        )
        assert erased.history == 1 and await store.get(other.event_id) is None
    finally:
        await store.close()
