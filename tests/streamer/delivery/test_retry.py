"""The retry policy: capped exponential backoff with full jitter, ``Retry-After`` (read,
capped), on its own and through a sink against a real receiver (tests/webhook_receiver.py).
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest

from streamer.delivery.retry import retry_after_seconds, retry_delay
from streamer.foundation.backoff import backoff_delay
from streamer.foundation.metrics import Metrics
from tests.streamer.delivery.webhook_setup import (
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


def test_backoff_is_capped_exponential_with_full_jitter() -> None:
    import random

    rng = random.Random(1)
    for attempts, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (6, 32.0), (7, 60.0), (500, 60.0)]:
        delays = [backoff_delay(attempts, 1.0, 60.0, rng) for _ in range(300)]
        assert all(0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling * 0.8  # the whole range is used
        assert min(delays) < ceiling * 0.2


def test_retry_after_parsing() -> None:
    now = time.time()
    assert retry_after_seconds("120") == 120
    assert retry_after_seconds(" 0 ") == 0
    assert retry_after_seconds("1.5") == 1.5
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds("-5") == 0
    later = format_datetime(datetime.fromtimestamp(now, UTC) + timedelta(seconds=30), usegmt=True)
    assert retry_after_seconds(later, now=now) == pytest.approx(30, abs=1)
    earlier = format_datetime(datetime.fromtimestamp(now, UTC) - timedelta(hours=1), usegmt=True)
    assert retry_after_seconds(earlier, now=now) == 0


def test_retry_delay_is_the_capped_retry_after_else_the_backoff() -> None:
    config = target("crm", "http://127.0.0.1:9/x", new_secret(), retry_after_max_s=30.0)
    rng = random.Random(1)
    assert retry_delay(config, 1, 10.0, rng) == 10.0
    assert retry_delay(config, 1, 3600.0, rng) == 30.0
    assert retry_delay(config, 7, 0.0, rng) == 0.0
    delays = [retry_delay(config, 9, None, rng) for _ in range(100)]
    assert all(0 <= d <= config.retry_max_delay_s for d in delays)


async def test_retry_policy_500_then_timeout_then_429_retry_after(
    receiver: Receiver, tmp_path: Path
) -> None:
    receiver.script = [
        answer(500, "boom"),
        slow(3.0),  # beyond timeout_s
        answer(429, "slow down", {"Retry-After": "1"}),
    ]
    metrics = Metrics()
    config = settings(
        tmp_path,
        target(
            "crm",
            receiver.url,
            receiver.secret,
            timeout_s=0.5,
            retry_initial_delay_s=0.1,
            retry_max_delay_s=0.2,
        ),
    )
    sink = await open_sink(config, metrics)
    try:
        event = make_event()
        await sink.append(event)
        await eventually(lambda: len(receiver.delivered()) == 1, 10, "delivery")
        assert await sink.outbox.state(event.event_id, "crm") == "delivered"
    finally:
        await sink.close()
    first, timed_out, throttled, delivered = receiver.requests
    assert [r.webhook_id for r in receiver.requests] == [event.event_id] * 4
    assert all(r.verified for r in receiver.requests)
    # Loose timing: after 500, backoff <= retry_max_delay_s (0.2 s);
    # the slow answer costs the 0.5 s timeout, then <= 0.2 s;
    # after 429 with Retry-After: 1, at least 1 s.
    assert timed_out.at - first.at < 2.0
    assert 0.45 <= throttled.at - timed_out.at < 3.0
    assert 0.95 <= delivered.at - throttled.at < 4.0
    assert sample(metrics, "lpr_webhook_retries_total", target="crm") == 3
    assert sample(metrics, "lpr_webhook_deliveries_total", target="crm", outcome="retry") == 3
    assert sample(metrics, "lpr_webhook_deliveries_total", target="crm", outcome="delivered") == 1
    assert sample(metrics, "lpr_webhook_dead_letters_total", target="crm") == 0


async def test_retry_after_is_capped(receiver: Receiver, tmp_path: Path) -> None:
    receiver.script = [answer(503, "maintenance", {"Retry-After": "3600"})]
    config = settings(tmp_path, target("crm", receiver.url, receiver.secret, retry_after_max_s=0.5))
    sink = await open_sink(config)
    try:
        await sink.append(make_event())
        took = await eventually(lambda: len(receiver.delivered()) == 1, 10, "delivery")
    finally:
        await sink.close()
    assert 0.45 <= receiver.requests[1].at - receiver.requests[0].at < 3.0
    assert took < 5
