"""A target's worker against a real HTTP receiver on 127.0.0.1 (tests/webhook_receiver.py):
per-camera order, each event once after an outage, targets independent, woken by a
re-drive. Nothing is mocked. The outage test keeps the receiver down 20 s in the suite
(the acceptance's 60 s with ``LPR_TEST_WEBHOOK_DOWN_S=60``: the backoff is capped at 2 s,
so a longer outage only adds more of the same retries); the others take a few seconds."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from pathlib import Path

from streamer.delivery.events import PlateEvent
from streamer.foundation.metrics import Metrics
from tests.streamer.delivery.webhook_setup import (
    assert_in_camera_order,
    open_sink,
    sample,
    settings,
    settled_depth,
    target,
)
from tests.webhook_receiver import (
    Receiver,
    answer,
    eventually,
    free_port,
    make_event,
    new_secret,
)

DOWN_S = float(os.environ.get("LPR_TEST_WEBHOOK_DOWN_S", "20"))
#: Options for the sink in tests: look at the outbox often, close quickly.


async def receiver_down_then_back(tmp_path: Path, down_s: float) -> dict[str, float]:
    """50 events from 3 cameras while the receiver's port refuses connections for
    ``down_s``; then it listens again on the same port."""
    secret = new_secret()
    port = await free_port()
    rx = Receiver(secret, port)  # not started: the port is closed
    metrics = Metrics()
    config = settings(
        tmp_path,
        target(
            "crm",
            f"http://127.0.0.1:{port}/hook",
            secret,
            retry_initial_delay_s=0.5,
            retry_max_delay_s=2.0,
        ),
    )
    sink = await open_sink(config, metrics)
    published: list[PlateEvent] = []
    try:
        start = time.monotonic()
        for i in range(50):
            event = make_event(("gate", "yard", "exit")[i % 3])
            await sink.append(event)
            published.append(event)
            # Spread over the first 80 % of the outage.
            await asyncio.sleep(max(0.0, start + (i + 1) * down_s * 0.8 / 50 - time.monotonic()))
        await asyncio.sleep(max(0.0, start + down_s - time.monotonic()))
        assert rx.requests == []
        assert sample(metrics, "lpr_webhook_retries_total", target="crm") >= 3
        await sink.refresh_metrics()
        assert sample(metrics, "lpr_outbox_depth", target="crm") == 50
        assert (
            sample(metrics, "lpr_outbox_oldest_undelivered_age_seconds", target="crm")
            >= down_s * 0.9
        )

        await rx.start()  # back, on the same port
        assert rx.port == port
        catch_up = await eventually(
            lambda: len(set(rx.delivered_ids())) == 50, within=30, what="all 50 delivered"
        )
        await asyncio.sleep(1.0)  # time for any duplicate to show up
    finally:
        await sink.close()
        await rx.stop()

    ids = [r.webhook_id for r in rx.requests]
    assert Counter(ids) == Counter(e.event_id for e in published)  # each exactly once
    assert all(r.verified and r.delivered for r in rx.requests)
    assert all(r.payload["event_id"] == r.webhook_id for r in rx.requests)
    assert_in_camera_order(ids, published)
    assert sample(metrics, "lpr_webhook_deliveries_total", target="crm", outcome="delivered") == 50
    assert sample(metrics, "lpr_outbox_depth", target="crm") == 0
    return {"catch_up_s": catch_up}


async def test_receiver_down_then_back_gets_all_50_once_in_order(
    tmp_path: Path,
) -> None:
    timings = await receiver_down_then_back(tmp_path, DOWN_S)
    # Backoff is capped at 2 s: the backlog drains within seconds of the return.
    assert timings["catch_up_s"] < 15, timings


async def test_two_targets_one_down(receiver: Receiver, tmp_path: Path) -> None:
    secret_b = new_secret()
    port_b = await free_port()
    down = Receiver(secret_b, port_b)
    metrics = Metrics()
    config = settings(
        tmp_path,
        target("up", receiver.url, receiver.secret),
        target("down", f"http://127.0.0.1:{port_b}/hook", secret_b, retry_max_delay_s=0.5),
    )
    sink = await open_sink(config, metrics)
    published: list[PlateEvent] = []
    sent_at: dict[str, float] = {}
    try:
        for i in range(20):
            event = make_event(("gate", "yard")[i % 2])
            await sink.append(event)
            sent_at[event.event_id] = time.monotonic()
            published.append(event)
            await asyncio.sleep(0.02)
        await eventually(lambda: len(receiver.delivered()) == 20, 5, "healthy target")
        latency = max(r.at - sent_at[r.webhook_id] for r in receiver.delivered())
        assert latency < 1.0  # on time, whatever the other target does
        assert await settled_depth(sink, metrics, "up", 0) == 0
        assert sample(metrics, "lpr_outbox_depth", target="down") == 20
        assert sample(metrics, "lpr_webhook_retries_total", target="down") >= 1
        assert sample(metrics, "lpr_webhook_retries_total", target="up") == 0

        await down.start()
        await eventually(lambda: len(down.delivered()) == 20, 10, "catch-up")
        await asyncio.sleep(0.3)
    finally:
        await sink.close()
        await down.stop()
    for rx in (receiver, down):
        ids = [r.webhook_id for r in rx.requests]
        assert Counter(ids) == Counter(e.event_id for e in published)
        assert all(r.verified for r in rx.requests)
        assert_in_camera_order(ids, published)


async def test_redrive_through_the_sink_wakes_the_worker(
    receiver: Receiver, tmp_path: Path
) -> None:
    receiver.script = [answer(400, "no")]
    sink = await open_sink(
        settings(tmp_path, target("crm", receiver.url, receiver.secret)), poll_interval_s=30.0
    )
    try:
        event = make_event()
        await sink.append(event)
        await eventually(
            lambda: len(receiver.requests) == 1 and receiver.requests[0].status == 400, 10, "400"
        )
        await asyncio.sleep(0.5)  # no polling within 30 s: only redrive() wakes it
        assert len(receiver.requests) == 1
        assert await sink.redrive([event.event_id]) == 1
        await eventually(lambda: len(receiver.delivered()) == 1, 5, "re-drive without polling")
    finally:
        await sink.close()
