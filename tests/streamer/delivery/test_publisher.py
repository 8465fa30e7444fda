"""The event publisher: every decision is committed to a real event log (the SQLite outbox)
before anything else sees it; a commit that fails is retried, never dropped; a full queue
holds the cameras' decisions back, loudly; an observer that hangs is named."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from streamer.config import OutboxConfig
from streamer.delivery.consumers import Consumers
from streamer.delivery.event_queue import event_bytes
from streamer.delivery.events import PlateEvent, build_event
from streamer.delivery.jsonl_delivery import JsonLinesDeliverer
from streamer.delivery.outbox import Outbox
from streamer.delivery.publisher import LOG_PART, EventPublisher
from streamer.foundation.metrics import Metrics
from tests.plate_passes import a_pass
from tests.streamer.delivery.webhook_setup import FAST
from tests.webhook_receiver import eventually


class Recorder:
    """An in-process observer that notes, for each event, whether the log had it already."""

    name = "recorder"

    def __init__(self, log: Outbox | None = None) -> None:
        self.events: list[PlateEvent] = []
        self.in_log_first: list[bool] = []
        self.log = log

    async def publish(self, event: PlateEvent) -> None:
        if self.log is not None:
            self.in_log_first.append(await self.log.crop(event.message_id) is not None)
        self.events.append(event)

    async def close(self) -> None:
        return None


class Hung(Recorder):
    """Hangs on its first ``hang`` events, then takes events again."""

    name = "hung"

    def __init__(self, hang: int) -> None:
        super().__init__()
        self.hang = hang

    async def publish(self, event: PlateEvent) -> None:
        if self.hang > 0:
            self.hang -= 1
            await asyncio.Event().wait()
        self.events.append(event)


def _passes(n: int) -> list:
    return [dataclasses.replace(a_pass(), event_id=f"pass-{i}") for i in range(n)]


@pytest.fixture
async def consumers(tmp_path: Path) -> AsyncIterator[Consumers]:
    """A real event log with one consumer (a JSON-lines file)."""
    metrics = Metrics()
    config = OutboxConfig(path=tmp_path / "outbox.sqlite3")
    file = JsonLinesDeliverer(metrics, tmp_path / "events.jsonl")
    opened = await Consumers.open(config, [file], metrics, **FAST)
    try:
        yield opened
    finally:
        await opened.close()


async def _cap(outbox: Outbox) -> None:
    """A real full database (SQLITE_FULL): no page more than it has now, and those filled."""

    def fill(conn: sqlite3.Connection) -> None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count={pages}")
        # Rows of a consumer of no one's (a dead letter of "filler", never pruned here) fill
        # what room the tables' pages have left, so that the next event does not fit.
        for size in (2048, 256, 16):
            with contextlib.suppress(sqlite3.OperationalError):  # full: the next size down
                while True:
                    seq = conn.execute(
                        "INSERT INTO events (event_id, camera, created_at, payload, crop) "
                        "VALUES (hex(randomblob(8)), 'filler', 0, '{}', randomblob(?))",
                        (size,),
                    ).lastrowid
                    conn.execute(
                        "INSERT INTO deliveries (event_id, target, seq, camera, state, "
                        "next_attempt_at, last_attempt_at) SELECT event_id, 'filler', seq, "
                        "'filler', 'dead', 0, 1e12 FROM events WHERE seq = ?",
                        (seq,),
                    )

    await outbox._call(fill, "test")


async def _uncap(outbox: Outbox) -> None:
    await outbox._call(lambda c: c.execute("PRAGMA max_page_count=1073741823"), "test")


async def test_an_event_is_in_the_log_before_anyone_sees_it(consumers: Consumers) -> None:
    metrics = consumers.metrics
    publisher = EventPublisher(metrics, jpeg_quality=80, queue_max_bytes=2**20)
    publisher.log = consumers
    recorder = Recorder(consumers.outbox)
    publisher.observers = [recorder]
    seen: list[bool] = []
    publisher.recent.watch(lambda e: seen.append(True))
    run = asyncio.create_task(publisher.run())
    try:
        await publisher.publish(_passes(3))
        assert await publisher.drain(10)
        assert [e.event_id for e in recorder.events] == ["pass-0", "pass-1", "pass-2"]
        assert recorder.in_log_first == [True, True, True] and len(seen) == 3
        worker = consumers.worker("file")
        assert worker is not None
        await eventually(lambda: worker.delivered == 3, 5, "the file")
        assert 'lpr_events_total{camera="gate"} 3.0' in generate_latest(metrics.registry).decode()
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


async def test_a_failing_commit_is_retried_and_nothing_is_lost(
    consumers: Consumers, caplog: pytest.LogCaptureFixture
) -> None:
    """The log's disk is full: events wait in memory, the service says so once and is not
    ready; the pipeline is not held up while the queue has room; once there is space again,
    every event is committed, in order, once."""
    publisher = EventPublisher(consumers.metrics, jpeg_quality=80, queue_max_bytes=2**24)
    publisher.log = consumers
    recorder = Recorder()
    publisher.observers = [recorder]
    await _cap(consumers.outbox)
    run = asyncio.create_task(publisher.run())
    try:
        with caplog.at_level(logging.ERROR, logger="streamer.delivery.publisher"):
            await asyncio.wait_for(publisher.publish(_passes(4)), 5)  # room in memory: no wait
            await eventually(lambda: LOG_PART in publisher.failing, 5, "the failure")
            await asyncio.sleep(1.0)  # several retries
        assert "database or disk is full" in publisher.failing[LOG_PART]
        assert recorder.events == [] and publisher.waiting == 4
        errors = [r for r in caplog.records if r.name == "streamer.delivery.publisher"]
        assert len(errors) == 1 and "event(s) wait in memory, retrying" in errors[0].getMessage()
        await _uncap(consumers.outbox)
        assert await publisher.drain(15)
        assert [e.event_id for e in recorder.events] == [f"pass-{i}" for i in range(4)]
        assert LOG_PART not in publisher.failing and publisher.healthy
        worker = consumers.worker("file")
        assert worker is not None
        await eventually(lambda: worker.delivered == 4, 10, "the file's four lines")
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


async def test_a_full_queue_holds_the_decisions_back_loudly(
    consumers: Consumers, caplog: pytest.LogCaptureFixture
) -> None:
    """The log cannot commit and the queue is full: ``publish`` waits (the camera's
    decisions wait; none is dropped), counted and logged once, readiness names it; the
    frame pixels of a queued event are gone (its pictures are encoded)."""
    metrics = consumers.metrics
    one = await build_event(_passes(1)[0], 80)
    publisher = EventPublisher(metrics, jpeg_quality=80, queue_max_bytes=2 * event_bytes(one))
    publisher.log = consumers
    await _cap(consumers.outbox)
    run = asyncio.create_task(publisher.run())
    try:
        with caplog.at_level(logging.ERROR, logger="streamer.delivery.publisher"):
            publishing = asyncio.create_task(publisher.publish(_passes(5)))
            await eventually(lambda: "event queue" in publisher.failing, 5, "the full queue")
            await asyncio.sleep(0.5)
            assert not publishing.done() and publisher.waiting == 2
        assert not publisher.healthy
        assert sum("the cameras' decisions wait" in r.getMessage() for r in caplog.records) == 1
        exposition = generate_latest(metrics.registry).decode()
        assert 'lpr_event_queue_waits_total{camera="gate"} 1.0' in exposition
        assert "lpr_event_queue_depth 2.0" in exposition
        await _uncap(consumers.outbox)
        await asyncio.wait_for(publishing, 15)
        assert await publisher.drain(15)
        assert publisher.emitted == 5 and publisher.dropped == 0
        await eventually(lambda: publisher.healthy, 5, "the episode's end")
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


async def test_a_hung_observer_is_named_and_the_others_are_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hung, good = Hung(hang=1), Recorder()
    metrics = Metrics()
    publisher = EventPublisher(
        metrics, jpeg_quality=80, queue_max_bytes=2**20, observer_timeout_s=0.2
    )
    publisher.observers = [hung, good]
    run = asyncio.create_task(publisher.run())
    try:
        with caplog.at_level(logging.ERROR, logger="streamer.delivery.publisher"):
            await publisher.publish(_passes(3))
            assert await publisher.drain(10)
        assert [e.event_id for e in good.events] == ["pass-0", "pass-1", "pass-2"]
        assert [e.event_id for e in hung.events] == ["pass-1", "pass-2"]
        (missed,) = [r for r in caplog.records if "could not take event" in r.getMessage()]
        assert "observer hung could not take event pass-0 (no answer within 0.2 s)" in (
            missed.getMessage()
        )
        assert publisher.healthy  # it took the next ones
        assert 'lpr_sink_errors_total{sink="hung"} 1.0' in (
            generate_latest(metrics.registry).decode()
        )
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


async def test_events_left_at_shutdown_are_logged_as_json(
    consumers: Consumers, caplog: pytest.LogCaptureFixture
) -> None:
    publisher = EventPublisher(consumers.metrics, jpeg_quality=80, queue_max_bytes=2**24)
    publisher.log = consumers
    await _cap(consumers.outbox)
    run = asyncio.create_task(publisher.run())
    try:
        await publisher.publish(_passes(2))
        with caplog.at_level(logging.ERROR, logger="streamer.delivery.publisher"):
            assert not await publisher.drain(0.5)
        left = [r.getMessage() for r in caplog.records if "never reached" in r.getMessage()]
        assert len(left) == 2 and '"event_id": "pass-0"' in left[0]
        assert publisher.dropped == 2
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


async def test_an_erased_pass_is_not_published(consumers: Consumers) -> None:
    """Erased while queued (by its text), or recorded as erased in the log: not committed,
    not shown."""
    publisher = EventPublisher(consumers.metrics, jpeg_quality=80, queue_max_bytes=2**24)
    publisher.log = consumers
    await consumers.outbox.record_erased(["pass-1"])
    await publisher.publish(_passes(3))  # queued; nobody commits yet
    found = publisher.erase(set(), "O567AM76")  # a_pass()'s text: every queued one
    assert found == {"pass-0", "pass-1", "pass-2"} and publisher.waiting == 0
    await publisher.publish([dataclasses.replace(a_pass(), event_id="pass-1", version=2)])
    assert publisher.waiting == 0  # a correction of an erased pass
    other = dataclasses.replace(a_pass(), event_id="pass-9", text="A001AA77")
    assert await consumers.append(await build_event(other, 80))
    assert not await consumers.append(
        await build_event(dataclasses.replace(other, event_id="pass-1"), 80)
    )  # the log refuses it too


class ClockedFence:
    """A camera lease that is valid until a given moment of a clock the test turns."""

    def __init__(self, token: int) -> None:
        self.now = 0.0
        self.valid_until = 10.0
        self.checked_at: list[float] = []
        self._token = token

    def may_publish(self, camera: str) -> bool:
        self.checked_at.append(time.time())
        return self.now < self.valid_until

    def token(self, camera: str) -> int | None:
        return self._token


async def test_events_carry_the_lease_they_were_decided_under(consumers: Consumers) -> None:
    """Each event of a leased camera carries its lease's token and the time it was decided,
    read before the lease was found valid; once the lease ran out, nothing is published."""
    publisher = EventPublisher(consumers.metrics, jpeg_quality=80, queue_max_bytes=2**24)
    publisher.log = consumers
    fence = ClockedFence(token=41)
    publisher.fence = fence
    recorder = Recorder()
    publisher.observers = [recorder]
    run = asyncio.create_task(publisher.run())
    try:
        await publisher.publish(_passes(2))
        fence.now = 11.0  # the lease ran out here
        await publisher.publish([dataclasses.replace(a_pass(), event_id="late")])
        assert await publisher.drain(10)
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
    assert [e.event_id for e in recorder.events] == ["pass-0", "pass-1"]
    assert publisher.fenced == 1
    for event, checked in zip(recorder.events, fence.checked_at, strict=False):
        assert event.lease is not None and event.lease.token == 41
        assert event.lease.decided_at_unix <= checked + 0.001  # (written to the millisecond)
    with sqlite3.connect(consumers.outbox.path) as db:
        logged = [json.loads(row[0]) for row in db.execute("SELECT payload FROM events")]
    assert [p["lease"]["token"] for p in logged] == [41, 41]
    publisher.fence = None
    assert (await publisher._event(a_pass())).lease is None  # type: ignore[union-attr]
