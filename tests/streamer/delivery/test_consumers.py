"""The webhook sink against a real HTTP receiver on 127.0.0.1 (tests/webhook_receiver.py).

Nothing of streamer.delivery is mocked: events go through the SQLite outbox and aiohttp to
an aiohttp server that verifies every signature with the ``standardwebhooks`` library.
Here: a pass and its correction, a kill -9 with deliveries pending, a full disk,
pruning, closing, no targets, and the workers run as supervised parts (a crash is
logged, the worker restarts, the event goes). Each takes a few seconds at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import sqlite3
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamer.delivery.consumer_config import deliverers_of
from streamer.delivery.consumers import HOUSEKEEPING_PART, Consumers
from streamer.delivery.events import PlateEvent, build_event
from streamer.delivery.outbox import Outbox, OutboxError
from streamer.domain.frames import Frame, FrameResult, PlateReading
from streamer.foundation.metrics import Metrics
from streamer.foundation.supervisor import Supervisor
from streamer.tracking.passes import PassDetector
from tests.log_records import traceback_of
from tests.streamer.delivery.webhook_setup import (
    open_consumers,
    open_sink,
    sample,
    settings,
    target,
)
from tests.webhook_receiver import (
    Receiver,
    answer,
    eventually,
    make_event,
    new_secret,
    slow,
)

PROJECT = Path(__file__).resolve().parents[3]


async def test_a_pass_and_its_correction_are_two_signed_messages_of_one_event(
    receiver: Receiver, tmp_path: Path
) -> None:
    """Reported on weak evidence, then contradicted by strong evidence: the pass detector's
    two decisions go through the outbox as two messages, each with its own webhook-id,
    both of the same event, both verified by ``standardwebhooks``."""
    box = (40.0, 20.0, 120.0, 40.0)
    pictures = {}
    for seed in range(40):
        image = np.full((60, 200, 3), 90, np.uint8)
        image[20:40, 40:120] = np.random.default_rng(seed).integers(0, 255, (20, 80, 1))
        pictures[seed] = image
    reads = [("C567AM76", 1)] * 15 + [("C567AM76", 2)] * 16
    reads += [("O567AM76", seed) for seed in range(3, 40)]
    detector = PassDetector("gate")
    decided = []
    for i, (text, seed) in enumerate(reads):
        frame = Frame("gate", i, i / 5, 1.7e9 + i / 5, time.monotonic(), pictures[seed])
        decided += detector.update(FrameResult(frame, (PlateReading(box, 0.7, text, 0.95),)))
    decided += detector.flush()

    sink = await open_sink(settings(tmp_path, target("crm", receiver.url, receiver.secret)))
    try:
        for plate_pass in decided:
            await sink.append(await build_event(plate_pass, jpeg_quality=90))
        await eventually(lambda: len(receiver.delivered()) == 2, within=10, what="2 delivered")
    finally:
        await sink.close()
    first, update = receiver.delivered()
    assert first.verified and update.verified
    assert first.payload["type"] == "plate" and update.payload["type"] == "plate.updated"
    event_id = first.payload["event_id"]
    assert update.payload["event_id"] == event_id and first.webhook_id == event_id
    assert update.webhook_id == f"{event_id}.v2" != first.webhook_id
    assert (first.payload["text"], first.payload["version"]) == ("C567AM76", 1)
    assert (update.payload["text"], update.payload["version"]) == ("O567AM76", 2)
    assert update.payload["previous_text"] == "C567AM76"
    assert update.payload["evidence"] > first.payload["evidence"]


async def test_a_withheld_pass_goes_only_to_the_targets_that_ask_for_it(
    receiver: Receiver, tmp_path: Path
) -> None:
    events_file = tmp_path / "events.jsonl"
    config = settings(
        tmp_path,
        target("all", f"{receiver.url}/all", receiver.secret, withheld=True),
        target("plates", f"{receiver.url}/plates", receiver.secret),
    )
    config = config.model_copy(
        update={"events": config.events.model_copy(update={"file": events_file})}
    )
    plate = make_event()
    withheld = dataclasses.replace(make_event(), confidence=0.31, withheld="low_confidence")
    sink = await open_sink(config, local=True)
    try:
        assert await sink.append(withheld) and await sink.append(plate)
        await eventually(
            lambda: len(receiver.delivered()) == 3 and events_file.exists(),
            within=10,
            what="3 POSTs",
        )
        await sink.wait_caught_up(10)
        stats = {name: await sink.outbox.stats(name) for name in sink.targets}
    finally:
        await sink.close()
    to_all = [r.payload for r in receiver.delivered("/hook/all")]
    assert [(p["type"], p["event_id"]) for p in to_all] == [
        ("plate.withheld", withheld.event_id),
        ("plate", plate.event_id),
    ]
    assert to_all[0]["withheld"] == "low_confidence" and to_all[0]["confidence"] == 0.31
    assert [r.payload["type"] for r in receiver.delivered("/hook/plates")] == ["plate"]
    # The events file carries plates only, and no consumer is left waiting for anything.
    lines = [json.loads(line) for line in events_file.read_text().splitlines()]
    assert [line["event_id"] for line in lines] == [plate.event_id]
    assert {name: s.depth for name, s in stats.items()} == dict.fromkeys(sink.targets, 0)


KILL_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    sys.path.insert(0, sys.argv[1])
    from tests.webhook_receiver import make_event
    from streamer.config import CameraConfig, OutboxConfig, Settings, WebhookTargetConfig
    from streamer.foundation.metrics import Metrics
    from tests.streamer.delivery.webhook_setup import open_consumers

    async def main():
        url, db, secret, count = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
        settings = Settings(
            cameras=[CameraConfig(name="gate", url="rtsp://cam/x")],
            webhooks=[WebhookTargetConfig(name="crm", url=url, secret=secret, timeout_s=30,
                                          retry_initial_delay_s=0.2, retry_max_delay_s=0.5)],
            outbox=OutboxConfig(path=db),
        )
        sink = await open_consumers(settings, Metrics(), poll_interval_s=0.2)
        for i in range(count):
            event = make_event(("gate", "yard", "exit")[i % 3])
            await sink.append(event)
            print(json.dumps({"event_id": event.event_id, "camera": event.camera}), flush=True)
        print("published", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def test_kill_9_with_deliveries_pending_then_restart_delivers_every_event(
    receiver: Receiver, tmp_path: Path
) -> None:
    # First 3 answers 200, then alternately 500 and a hang: at the kill some events are
    # delivered, some waiting for a retry, some in flight, most not tried yet.
    receiver.script = [answer(200)] * 3 + [answer(500, "down"), slow(60.0)] * 20
    db = tmp_path / "outbox.sqlite3"
    stderr = (tmp_path / "child.err").open("w")
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        KILL_CHILD,
        str(PROJECT),
        receiver.url,
        str(db),
        receiver.secret,
        "30",
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        cwd=PROJECT,
        env={**os.environ, "PYTHONPATH": str(PROJECT)},
    )
    published: list[str] = []
    try:
        assert child.stdout is not None
        while True:
            line = (await asyncio.wait_for(child.stdout.readline(), 60)).decode().strip()
            assert line, f"child ended early: {(tmp_path / 'child.err').read_text()}"
            if line == "published":
                break
            published.append(json.loads(line)["event_id"])
        await eventually(lambda: len(receiver.requests) >= 6, 20, "some attempts")
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
        stderr.close()
    assert child.returncode == -signal.SIGKILL
    before = len(receiver.delivered())
    assert 1 <= before < 30  # deliveries were really pending at the kill

    receiver.script = []  # healthy from now on
    restarted = await open_sink(settings(tmp_path, target("crm", receiver.url, receiver.secret)))
    try:
        await eventually(
            lambda: set(receiver.delivered_ids()) >= set(published), 20, "every event delivered"
        )
        await restarted.refresh_metrics()
        assert (await restarted.outbox.stats("crm")).depth == 0
    finally:
        await restarted.close()
    assert len(published) == 30
    for r in receiver.requests:
        assert r.verified
        assert r.payload["event_id"] == r.webhook_id  # a duplicate has the same webhook-id
    assert set(r.webhook_id for r in receiver.requests) == set(published)


async def test_full_disk_makes_publish_fail_loudly(receiver: Receiver, tmp_path: Path) -> None:
    metrics = Metrics()
    sink = await open_sink(
        settings(tmp_path, target("crm", receiver.url, receiver.secret)), metrics
    )
    try:
        await sink.append(make_event())
        assert sink.healthy
        outbox = sink.outbox
        pages = await outbox._call(lambda c: c.execute("PRAGMA page_count").fetchone()[0], "t")
        await outbox._call(lambda c: c.execute(f"PRAGMA max_page_count={pages}"), "test")
        big = make_event()
        big = PlateEvent(**{**big.__dict__, "crop_jpeg": b"\xff" * 300_000})
        with pytest.raises(OutboxError, match="database or disk is full"):
            await sink.append(big)  # never a silent loss: the caller knows
        assert not sink.healthy
        assert sample(metrics, "lpr_outbox_errors_total") >= 1
        await outbox._call(lambda c: c.execute("PRAGMA max_page_count=1073741823"), "test")
        await sink.append(big)
        assert sink.healthy
        await eventually(lambda: big.event_id in receiver.delivered_ids(), 10, "delivery")
    finally:
        await sink.close()


async def test_delivered_events_are_pruned_after_the_retention(
    receiver: Receiver, tmp_path: Path
) -> None:
    config = settings(
        tmp_path,
        target("crm", receiver.url, receiver.secret),
        retention_s=0.5,
        prune_interval_s=0.2,
    )
    sink = await open_sink(config)
    try:
        event = make_event()
        await sink.append(event)
        await eventually(lambda: len(receiver.delivered()) == 1, 10, "delivery")
        assert await sink.outbox.crop(event.event_id) is not None
        took = await eventually_async(lambda: sink.outbox.crop(event.event_id), 10)
        assert took >= 0.3  # kept for the retention first
    finally:
        await sink.close()


async def eventually_async(fetch: Any, within: float) -> float:
    start = time.monotonic()
    while await fetch() is not None:
        assert time.monotonic() - start < within, "not pruned"
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def test_close_waits_briefly_for_posts_in_flight_and_keeps_them_pending(
    receiver: Receiver, tmp_path: Path
) -> None:
    receiver.script = [slow(30.0)]
    config = settings(tmp_path, target("crm", receiver.url, receiver.secret, timeout_s=60))
    sink = await open_sink(config, close_timeout_s=0.3)
    event = make_event()
    await sink.append(event)
    await eventually(lambda: len(receiver.requests) == 1, 5, "POST in flight")
    started = time.monotonic()
    await asyncio.gather(sink.close(), sink.close())  # idempotent, concurrent
    assert time.monotonic() - started < 3
    await sink.close()
    assert not sink.healthy
    with pytest.raises(RuntimeError, match="closed"):
        await sink.append(make_event())
    # Still pending: the next start delivers it.
    again = await open_sink(config)
    try:
        await eventually(lambda: event.event_id in receiver.delivered_ids(), 5, "redelivery")
    finally:
        await again.close()
    tasks = {t.get_name() for t in asyncio.all_tasks()}
    assert not any(name.startswith("webhook-") for name in tasks)


async def test_no_consumer_without_enabled_targets(tmp_path: Path) -> None:
    """No consumer (stdout off, no history, a disabled target): no deliverer, and a set of
    none is refused: the service then opens no log."""
    secret = new_secret()
    assert deliverers_of(settings(tmp_path), Metrics()) == []
    disabled = target("off", "http://127.0.0.1:9/x", secret, enabled=False)
    assert deliverers_of(settings(tmp_path, disabled), Metrics()) == []
    with pytest.raises(ValueError, match="at least one"):
        await Consumers.open(settings(tmp_path).outbox, [], Metrics())
    assert not (tmp_path / "outbox.sqlite3").exists()


async def test_a_crashed_worker_is_logged_once_restarted_and_delivers_after_the_restart(
    receiver: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A real fault, no mock: the stored payload of a pending event is not JSON (a damaged
    row, another program's write), so the worker's read of the outbox raises an error that
    is not an OutboxError. Its part crashes (one ERROR record, with the traceback), waits
    to restart (the sink is not healthy meanwhile), runs again once the row is mended and
    delivers the event; close() stops and awaits every part."""
    config = settings(tmp_path, target("crm", receiver.url, receiver.secret))
    event = make_event()
    box = await Outbox.open(config.outbox.path, ["crm"])
    try:
        await box.add(event)
    finally:
        await box.close()
    with contextlib.closing(sqlite3.connect(config.outbox.path)) as db, db:
        select = "SELECT payload FROM events WHERE event_id = ?"
        (payload,) = db.execute(select, (event.event_id,)).fetchone()
        update = "UPDATE events SET payload = ? WHERE event_id = ?"
        db.execute(update, ("{damaged", event.event_id))

    supervisor = Supervisor(backoff_s=1.0)  # the service's, as app.py passes it
    with caplog.at_level(logging.ERROR):
        sink = await open_sink(config, supervisor=supervisor)
        try:
            assert set(sink.parts) == {"webhook:crm", HOUSEKEEPING_PART}
            part = supervisor.parts["webhook:crm"]
            await eventually(lambda: part.state == "restarting", 5, "the crash")
            assert not sink.healthy and receiver.requests == []
            with contextlib.closing(sqlite3.connect(config.outbox.path)) as db, db:
                db.execute(update, (payload, event.event_id))  # mended while it waits
            await eventually(lambda: len(receiver.delivered()) == 1, 10, "the delivery")
            assert receiver.delivered_ids() == [event.event_id]
            assert (part.state, part.restarts) == ("running", 1)
            assert (part.last_error or "").startswith("JSONDecodeError: ")
            assert sink.healthy
            assert supervisor.parts[HOUSEKEEPING_PART].restarts == 0
        finally:
            await sink.close()
    (crash,) = caplog.records  # logged once, by the supervisor, and nothing else failed
    assert crash.name == "streamer.foundation.supervisor"
    assert crash.getMessage().startswith("webhook:crm crashed (restart 1 in 1 s)")
    trace = traceback_of(crash)
    assert "json.decoder.JSONDecodeError" in trace and "in next_batch" in trace
    assert sink.parts == {} and not supervisor.parts  # closed: its parts gone
    assert supervisor.task("webhook:crm") is None
    tasks = {t.get_name() for t in asyncio.all_tasks()}
    assert not any(name.startswith(("part-webhook", "webhook-")) for name in tasks)


async def test_a_reload_replaces_the_targets_and_their_parts(
    receiver: Receiver, tmp_path: Path
) -> None:
    """Reload: an unchanged target keeps its worker (no restart), an added one starts, a
    removed one stops and its part is gone; events committed afterwards go to the new set."""
    crm = target("crm", f"{receiver.url}/crm", receiver.secret)
    erp = target("erp", f"{receiver.url}/erp", receiver.secret)
    supervisor, metrics = Supervisor(), Metrics()
    consumers = await open_consumers(settings(tmp_path, crm), metrics, supervisor=supervisor)
    try:
        crm_worker = consumers.worker("crm")
        await consumers.replace(deliverers_of(settings(tmp_path, crm, erp), metrics))
        assert consumers.targets == ("crm", "erp") and consumers.outbox.targets == ("crm", "erp")
        assert consumers.worker("crm") is crm_worker  # unchanged: left running
        assert {"webhook:crm", "webhook:erp"} <= set(supervisor.parts)
        await consumers.replace(deliverers_of(settings(tmp_path, erp), metrics))
        assert consumers.targets == ("erp",)
        assert "webhook:crm" not in supervisor.parts  # a removed target is no part any more
        assert supervisor.parts["webhook:erp"].state == "running"
        event = make_event()
        await consumers.append(event)
        await eventually(lambda: receiver.delivered_ids("/hook/erp") == [event.event_id], 10, "erp")
        assert receiver.delivered_ids("/hook/crm") == []
    finally:
        await consumers.close()
    await supervisor.stop()


async def test_a_cancelled_reload_still_leaves_a_whole_set_running(
    receiver: Receiver, tmp_path: Path
) -> None:
    """A SIGTERM cancels the reload while it swaps (the old target's delivery in flight
    holds the swap up): the swap runs to its end anyway, and the new target delivers."""
    crm = target("crm", f"{receiver.url}/crm", receiver.secret, timeout_s=5.0)
    crm2 = target("crm", f"{receiver.url}/crm2", receiver.secret)
    receiver.script.append(slow(1.0, 200))  # the old worker's POST in flight during the swap
    supervisor, metrics = Supervisor(), Metrics()
    consumers = await open_consumers(settings(tmp_path, crm), metrics, supervisor=supervisor)
    try:
        await consumers.append(make_event())
        await eventually(lambda: len(receiver.requests) == 1, 5, "the slow POST")
        swap = asyncio.create_task(
            consumers.replace(deliverers_of(settings(tmp_path, crm2), metrics))
        )
        await asyncio.sleep(0.1)
        swap.cancel()
        with pytest.raises(asyncio.CancelledError):
            await swap
        assert consumers.targets == ("crm",)
        poster = consumers.deliverer("crm")
        assert poster is not None and poster.config.url.endswith("/crm2")  # the new one runs
        assert supervisor.parts["webhook:crm"].state == "running"
        event = make_event()
        await consumers.append(event)
        await eventually(lambda: event.event_id in receiver.delivered_ids("/hook/crm2"), 10, "crm2")
    finally:
        await consumers.close()
    await supervisor.stop()


async def test_a_secret_rotation_dead_letters_no_event(receiver: Receiver, tmp_path: Path) -> None:
    """The target signs with the new secret and the old one (``previous_secrets``) while the
    receiver switches from the old to the new mid-flow: every event is delivered, none is a
    dead letter; and a receiver that switched before the sender did is retried, not
    dead-lettered (401s within ``retry_rejected_for_s``)."""
    old, new = receiver.secret, new_secret()
    metrics = Metrics()
    rotating = target("crm", receiver.url, new, previous_secrets=[old])
    consumers = await open_sink(settings(tmp_path, rotating), metrics)
    events = [make_event() for _ in range(20)]
    try:
        for i, event in enumerate(events):
            if i == 10:
                receiver.secret = new  # the receiver switches
            await consumers.append(event)
            await asyncio.sleep(0.05)
        await eventually(lambda: len(receiver.delivered()) == len(events), 15, "every event")
        assert sorted(receiver.delivered_ids()) == sorted(e.event_id for e in events)
        assert await consumers.dead_letters() == []
        assert not [r for r in receiver.requests if not r.verified]
    finally:
        await consumers.close()
    # The receiver is ahead: only the new secret, the sender still only the old.
    ahead = target("crm", receiver.url, old, retry_initial_delay_s=0.05, retry_max_delay_s=0.2)
    consumers = await open_sink(settings(tmp_path, ahead), metrics)
    late = make_event()
    try:
        await consumers.append(late)
        await eventually(lambda: any(not r.verified for r in receiver.requests), 5, "a 401")
        await asyncio.sleep(0.5)  # retried meanwhile, within retry_rejected_for_s
        assert await consumers.dead_letters() == [] and consumers.problem is None
        await consumers.replace(
            deliverers_of(settings(tmp_path, target("crm", receiver.url, new)), metrics)
        )
        await eventually(lambda: late.event_id in receiver.delivered_ids(), 10, "the retry")
        assert await consumers.dead_letters() == []
    finally:
        await consumers.close()


async def test_a_consumer_that_lags_or_piles_up_is_named_by_readiness(
    receiver: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A receiver down: past ``outbox.max_lag_s`` the set is not healthy and its problem
    names the consumer; past ``outbox.max_pending`` (warned at 80 %) the oldest pending
    events become dead letters, re-drivable; back up, all is delivered and healthy."""
    receiver.default = answer(503, "down")
    config = settings(
        tmp_path, target("rx", receiver.url, receiver.secret), max_lag_s=0.5, max_pending=5
    )
    consumers = await open_sink(config, stats_interval_s=0.1)
    events = [make_event() for _ in range(7)]
    try:
        with caplog.at_level(logging.WARNING, logger="streamer.delivery.backlogs"):
            for event in events:
                await consumers.append(event)
            await eventually(lambda: not consumers.healthy, 5, "the lag problem")

            def backlog() -> list[str]:
                return [
                    r.getMessage() for r in caplog.records if r.name == "streamer.delivery.backlogs"
                ]

            await eventually(lambda: len(backlog()) >= 2, 5, "the warning and the trim")
        assert "consumer rx:" in (consumers.problem or "")
        messages = backlog()
        assert "near outbox.max_pending (5)" in messages[0]
        assert "2 oldest pending event(s) made dead letters" in messages[1]
        dead = await consumers.dead_letters("rx")
        assert [d.event_id for d in dead] == [e.event_id for e in events[:2]]
        receiver.default = answer(204)
        assert await consumers.redrive() == 2
        await eventually(lambda: len(set(receiver.delivered_ids())) == 7, 15, "every event")
        await eventually(lambda: consumers.healthy, 5, "healthy again")
    finally:
        await consumers.close()
