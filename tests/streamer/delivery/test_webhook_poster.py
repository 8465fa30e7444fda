"""``WebhookPoster.post`` itself, against a real HTTP receiver on 127.0.0.1 that verifies
every signature with ``standardwebhooks`` (tests/webhook_receiver.py), without the outbox: a
receiver that rejects (401, 403, 404) retried for ``retry_rejected_for_s`` from its first
rejection since its last 2xx, then a dead letter with the reason, and shown as the poster's
``problem`` meanwhile; a secret's rotation, every request signed with the secret and each of
``previous_secrets`` so that a receiver holding either accepts it.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from streamer.config import CameraConfig, OutboxConfig, Settings, WebhookTargetConfig
from streamer.delivery.deliverer import Outcome
from streamer.delivery.outbox_sql import PendingDelivery
from streamer.delivery.webhook_delivery import WebhookPoster
from tests.webhook_receiver import Receiver, answer, make_event, new_secret


def target(name: str, url: str, secret: str, **fields: Any) -> WebhookTargetConfig:
    fields.setdefault("timeout_s", 2.0)
    return WebhookTargetConfig(name=name, url=url, secret=secret, **fields)


class Clock:
    """A monotonic clock the test moves (``now``)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pending(index: int = 0) -> PendingDelivery:
    """A pending delivery of a new event, as the outbox gives it (with the crop)."""
    event = make_event()
    return PendingDelivery(
        event_id=event.event_id,
        camera=event.camera,
        seq=index + 1,
        created_at=time.time(),
        attempts=0,
        payload=event.to_dict(include_crop=False),
        crop=event.crop_jpeg,
    )


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def post_all(
    poster: WebhookPoster, session: aiohttp.ClientSession, clock: Clock, at: list[float]
) -> list[Outcome]:
    """One POST of a new delivery at each time of ``at`` (seconds on ``clock``)."""
    outcomes = []
    for i, moment in enumerate(at):
        clock.now = 1000.0 + moment
        outcomes.append(await poster.post(session, pending(i)))
    return outcomes


async def test_a_rejecting_target_is_retried_until_it_takes_the_event(
    receiver: Receiver, session: aiohttp.ClientSession
) -> None:
    receiver.script = [answer(401, "who are you"), answer(401, "who are you")]
    receiver.default = answer(204)
    clock = Clock()
    poster = WebhookPoster(target("crm", receiver.url, receiver.secret), clock=clock)
    assert poster.config.retry_rejected_for_s == 600 and poster.problem is None
    item = pending()
    first = await poster.post(session, item)
    assert first == Outcome("retry", "HTTP 401: who are you")  # not a dead letter
    clock.now += 12.4
    assert poster.problem is None  # within the window: only retried, readiness unchanged
    assert poster.ready
    assert await poster.post(session, item) == Outcome("retry", "HTTP 401: who are you")
    assert await poster.post(session, item) == Outcome("delivered")
    assert poster.problem is None
    assert [r.status for r in receiver.requests] == [401, 401, 204]
    assert len({r.body for r in receiver.requests}) == 1  # the same event each time


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_with_a_zero_window_a_rejection_is_a_dead_letter_at_once(
    receiver: Receiver, session: aiohttp.ClientSession, status: int
) -> None:
    receiver.default = answer(status, "no")
    poster = WebhookPoster(target("crm", receiver.url, receiver.secret, retry_rejected_for_s=0))
    assert await poster.post(session, pending()) == Outcome("dead", f"HTTP {status}: no")
    assert poster.problem is not None and poster.problem.endswith(
        "its events become dead letters (retry_rejected_for_s: 0 s)"
    )


async def test_a_rejection_past_the_window_is_a_dead_letter_with_the_reason(
    receiver: Receiver, session: aiohttp.ClientSession
) -> None:
    receiver.default = answer(403, "forbidden")
    clock = Clock()
    config = target("crm", receiver.url, receiver.secret, retry_rejected_for_s=0.5)
    poster = WebhookPoster(config, clock=clock)
    outcomes = await post_all(poster, session, clock, [0.0, 0.25, 0.375, 0.5, 5.0])
    assert [o.kind for o in outcomes] == ["retry", "retry", "retry", "dead", "dead"]
    assert outcomes[0] == Outcome("retry", "HTTP 403: forbidden")
    assert outcomes[3].error == (
        "HTTP 403: forbidden (rejected for longer than retry_rejected_for_s, 0.5 s)"
    )
    assert poster.problem == (
        "webhook crm: rejected with HTTP 403 for 5 s: its events become dead letters "
        "(retry_rejected_for_s: 0.5 s)"
    )
    # Other 4xx and 3xx are dead letters at once, window or not; a 429 is retried as before.
    for status in (400, 410, 422, 301, 302):
        receiver.script = [answer(status, "nope")]
        poster = WebhookPoster(target("crm", receiver.url, receiver.secret))
        assert await poster.post(session, pending()) == Outcome("dead", f"HTTP {status}: nope")
        assert poster.problem is None
    receiver.script = [answer(429, "slow down", {"Retry-After": "7"})]
    assert await poster.post(session, pending()) == Outcome("retry", "HTTP 429: slow down", 7)


async def test_a_2xx_starts_the_window_again(
    receiver: Receiver, session: aiohttp.ClientSession
) -> None:
    receiver.script = [answer(404, "gone"), answer(200), answer(404, "gone"), answer(503)]
    receiver.default = answer(404, "gone")
    clock = Clock()
    config = target("crm", receiver.url, receiver.secret, retry_rejected_for_s=0.5)
    poster = WebhookPoster(config, clock=clock)
    # 404 at 0; 200 at 0.25 (resets); 404 at 0.75 (a new window: retried although 0.75 s
    # after the first); a 503 leaves the window running; dead from 1.25 on.
    outcomes = await post_all(poster, session, clock, [0.0, 0.25, 0.75, 1.0, 1.125, 1.25])
    assert [o.kind for o in outcomes] == ["retry", "delivered", "retry", "retry", "retry", "dead"]
    assert outcomes[5].error is not None and "longer than retry_rejected_for_s" in outcomes[5].error


async def test_previous_secrets_sign_too_so_either_receiver_accepts(
    session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    new, old, older = new_secret(), new_secret(), new_secret()
    config = Settings(
        cameras=[CameraConfig(name="gate", url="rtsp://cam/x")],
        webhooks=[target("crm", "http://127.0.0.1:1/hook", new, previous_secrets=[old, older])],
        outbox=OutboxConfig(path=tmp_path / "outbox.sqlite3"),
    )
    (rotating,) = config.webhooks
    assert [s.get_secret_value() for s in rotating.previous_secrets] == [old, older]
    for holds in (new, old, older):
        receiver = await Receiver(holds).start()  # answers 401 unless its secret verifies
        try:
            poster = WebhookPoster(rotating.model_copy(update={"url": receiver.url}))
            assert await poster.post(session, pending()) == Outcome("delivered")
        finally:
            await receiver.stop()
        (request,) = receiver.requests
        assert request.verified, request.verify_error
    headers, body = request.headers, request.body
    signatures = headers["webhook-signature"].split(" ")
    assert len(signatures) == 3 and all(s.startswith("v1,") for s in signatures)
    signed_at = datetime.fromtimestamp(int(headers["webhook-timestamp"]), UTC)
    assert signatures == [  # the current secret first
        Webhook(s).sign(headers["webhook-id"], signed_at, body.decode()) for s in (new, old, older)
    ]
    for holds in (new, old, older):
        assert Webhook(holds).verify(body, headers) == request.body_json
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)
    # No secret shows.
    texts = [repr(config), str(config), json.dumps(config.redacted()), repr(rotating)]
    for secret in (new, old, older):
        assert all(secret not in t and secret.removeprefix("whsec_") not in t for t in texts)
    # Without previous secrets: one signature, as before.
    alone = WebhookPoster(WebhookTargetConfig(name="crm", url="http://h/x", secret=new))
    now = datetime.now(UTC)
    assert alone.signature("id", now, "{}") == Webhook(new).sign("id", now, "{}")
