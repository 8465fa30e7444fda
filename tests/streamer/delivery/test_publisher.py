"""The event publisher: pipelines never wait on sinks; a hung or failing sink is named,
its missed events logged, the other sinks served; a full queue drops loudly."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from streamer.delivery.events import JsonLinesSink, PlateEvent, build_event
from streamer.delivery.publisher import EventLog, EventPublisher
from streamer.ops.metrics import Metrics
from tests.log_records import traceback_of
from tests.plate_passes import a_pass
from tests.streamer.delivery.webhook_setup import open_sink, settings, target
from tests.webhook_receiver import Receiver, eventually


class Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.events: list[PlateEvent] = []

    async def publish(self, event: PlateEvent) -> None:
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


async def test_a_hung_sink_delays_no_pipeline_and_is_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hung, good = Hung(hang=1), Recorder()
    metrics = Metrics()
    publisher = EventPublisher([hung, good], metrics, jpeg_quality=80, sink_timeout_s=0.2)
    task = asyncio.create_task(publisher.run())
    try:
        with caplog.at_level(logging.ERROR, logger="streamer.delivery.publisher"):
            publisher.submit(_passes(3))  # returns at once, whatever the sinks do
            assert publisher.waiting == 3
            assert await publisher.drain(10)
        assert [e.event_id for e in good.events] == ["pass-0", "pass-1", "pass-2"]
        # The hung sink missed pass-0 (logged as JSON, to replay it), then took the rest.
        assert [e.event_id for e in hung.events] == ["pass-1", "pass-2"]
        (missed,) = [r for r in caplog.records if "could not take event" in r.getMessage()]
        assert "sink hung could not take event pass-0 (no answer within 0.2 s)" in (
            missed.getMessage()
        )
        assert json.loads(missed.getMessage().split("): ", 1)[1])["event_id"] == "pass-0"
        assert publisher.healthy  # it took the next ones
        exposition = generate_latest(metrics.registry).decode()
        assert 'lpr_sink_errors_total{sink="hung"} 1.0' in exposition
        assert 'lpr_events_total{camera="gate"} 3.0' in exposition
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_failing_file_sink_makes_the_publisher_unhealthy_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "events"
    folder.mkdir()
    blocked = folder / "events.jsonl"
    blocked.mkdir()  # a folder where the file should be: every write fails
    sink = JsonLinesSink(blocked)
    publisher = EventPublisher([sink, Recorder()], Metrics(), jpeg_quality=80)
    task = asyncio.create_task(publisher.run())
    try:
        with caplog.at_level(logging.ERROR, logger="streamer.delivery.publisher"):
            publisher.submit(_passes(2))
            assert await publisher.drain(10)
        assert not publisher.healthy
        assert publisher.failing[sink.name].startswith("IsADirectoryError")
        errors = [r for r in caplog.records if "could not take event" in r.getMessage()]
        assert len(errors) == 2  # every missed event is logged...
        assert "Traceback" in traceback_of(errors[0]) and not traceback_of(errors[1])  # one
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_full_queue_drops_loudly(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    publisher = EventPublisher([Recorder()], metrics, jpeg_quality=80, queue_size=2)
    with caplog.at_level(logging.ERROR, logger="streamer.delivery.publisher"):
        publisher.submit(_passes(3))  # nobody publishes: the third does not fit
    assert (publisher.waiting, publisher.dropped) == (2, 1)
    assert any("event queue full" in r.getMessage() for r in caplog.records)
    assert (
        'lpr_events_dropped_total{camera="gate"} 1.0' in generate_latest(metrics.registry).decode()
    )
    # At shutdown what could not be published is said too.
    with caplog.at_level(logging.ERROR, logger="streamer.delivery.publisher"):
        assert not await publisher.drain(0.1)
    assert sum("not published" in r.getMessage() for r in caplog.records) == 3


def test_the_event_log_gives_each_pass_at_its_newest_version() -> None:
    log = EventLog(limit=10)
    first, other = a_pass(), dataclasses.replace(a_pass(), event_id="other")
    corrected = dataclasses.replace(a_pass(), version=2, previous_text="C567AM76")
    for plate_pass in (first, other, corrected):
        log.add(asyncio.run(build_event(plate_pass, 80)))
    assert [(e.event_id, e.version) for e in log.latest()] == [("other", 1), (first.event_id, 2)]
    assert log.find(first.event_id).version == 2  # type: ignore[union-attr]  # a bare id: newest
    assert log.find(f"{first.event_id}.v2").version == 2  # type: ignore[union-attr]
    assert log.find("nobody") is None
    for i in range(12):  # bounded: the oldest go first
        log.add(asyncio.run(build_event(dataclasses.replace(a_pass(), event_id=f"p{i}"), 80)))
    assert len(log.events) == 10 and log.find("other") is None


async def test_a_replaced_webhook_sink_loses_no_event(tmp_path: Path, receiver: Receiver) -> None:
    """A reload adds a webhook target while passes keep coming: the old sink is closed and
    the new one opened on the same outbox with the publisher paused, so every event reaches
    the first target exactly once and the new target gets those after the swap."""
    crm = target("crm", f"{receiver.url}/crm", receiver.secret)
    erp = target("erp", f"{receiver.url}/erp", receiver.secret)
    metrics = Metrics()
    first = await open_sink(settings(tmp_path, crm), metrics)
    publisher = EventPublisher([Recorder(), first], metrics, jpeg_quality=80)
    run = asyncio.create_task(publisher.run())
    passes = _passes(30)

    async def feed() -> None:
        for plate_pass in passes:
            publisher.submit([plate_pass])
            await asyncio.sleep(0.02)

    feeding = asyncio.create_task(feed())
    try:
        await eventually(lambda: len(receiver.delivered_ids("/hook/crm")) >= 5, 10, "deliveries")
        second = await publisher.replace_sink(
            first, lambda: open_sink(settings(tmp_path, crm, erp), metrics)
        )
        assert second is not None and publisher.sinks[1] is second
        await feeding
        assert await publisher.drain(10)
        ids = [p.event_id for p in passes]
        await eventually(lambda: len(receiver.delivered_ids("/hook/crm")) == len(ids), 20, "all")
        assert sorted(receiver.delivered_ids("/hook/crm")) == sorted(ids)  # once each
        # The two targets are delivered independently: wait for the new one's last event too.
        await eventually(lambda: ids[-1] in receiver.delivered_ids("/hook/erp"), 20, "erp")
        after = receiver.delivered_ids("/hook/erp")
        assert after and set(after) < set(ids) and ids[-1] in after
        assert not publisher.failing  # the closed sink was never given an event
        await second.close()
    finally:
        feeding.cancel()
        run.cancel()
        await asyncio.gather(feeding, run, return_exceptions=True)
