"""One signed POST and what its answer comes to, against a real HTTP receiver on
127.0.0.1 that verifies every signature with ``standardwebhooks``
(tests/webhook_receiver.py): signatures and the secret kept out of sight, retryable
answers and dead letters with their reason, the event in the Standard Webhooks envelope or
bare, the crop as base64, a URL or nothing. (The retries of a rejecting receiver and the
signatures of a secret's rotation: test_webhook_poster.py.)
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from standardwebhooks import Webhook, WebhookVerificationError

from streamer.delivery.webhook_delivery import USER_AGENT
from streamer.domain.picture_links import PictureLinks, picture_urls
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
)


async def test_signatures_verify_and_tampering_fails(
    receiver: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    config = settings(tmp_path, target("crm", receiver.url, receiver.secret))
    with caplog.at_level(logging.DEBUG):
        sink = await open_sink(config, metrics)
        try:
            event = make_event()
            await sink.append(event)
            await eventually(lambda: len(receiver.delivered()) == 1, 10, "delivery")
        finally:
            await sink.close()
    (request,) = receiver.requests
    assert request.verified, request.verify_error
    headers = request.headers
    assert headers["webhook-id"] == event.event_id
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 10
    assert headers["webhook-signature"].startswith("v1,")
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"] == USER_AGENT and USER_AGENT.startswith("lpr-streamer/")
    assert Webhook(receiver.secret).verify(request.body, headers) == request.body_json

    tampered = request.body.replace(event.text.encode(), b"X000XX00")
    assert tampered != request.body
    with pytest.raises(WebhookVerificationError):
        Webhook(receiver.secret).verify(tampered, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(request.body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(receiver.secret).verify(request.body, {**headers, "webhook-id": "other"})

    # The secret is nowhere to be seen.
    raw = receiver.secret.removeprefix("whsec_")
    exposed = [
        caplog.text,
        generate_latest(metrics.registry).decode(),
        repr(config),
        str(config),
        json.dumps(config.redacted()),
        request.body.decode(),
    ]
    for text in exposed:
        assert receiver.secret not in text and raw not in text


async def test_a_wrong_secret_fails_at_the_receiver(receiver: Receiver, tmp_path: Path) -> None:
    wrong = target("crm", receiver.url, new_secret(), retry_rejected_for_s=0)
    sink = await open_sink(settings(tmp_path, wrong))
    try:
        await sink.append(make_event())
        await eventually(lambda: len(receiver.requests) == 1, 10, "attempt")
        dead = []
        for _ in range(100):
            dead = await sink.dead_letters()
            if dead:
                break
            await asyncio.sleep(0.05)
    finally:
        await sink.close()
    (request,) = receiver.requests
    assert not request.verified and request.verify_error == "No matching signature found"
    assert [d.reason for d in dead] == ["HTTP 401: bad signature"]  # not retried with 0


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
async def test_retryable_answers_are_retried(
    receiver: Receiver, tmp_path: Path, status: int
) -> None:
    receiver.script = [answer(status, "try later")]
    metrics = Metrics()
    sink = await open_sink(
        settings(tmp_path, target("crm", receiver.url, receiver.secret)), metrics
    )
    try:
        await sink.append(make_event())
        await eventually(lambda: len(receiver.delivered()) == 1, 10, "delivery")
    finally:
        await sink.close()
    assert [r.status for r in receiver.requests] == [status, 200]
    first, retry = receiver.requests
    assert retry.body == first.body  # the same payload, timestamp included, on every attempt
    assert sample(metrics, "lpr_webhook_retries_total", target="crm") == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 422, 301])
async def test_other_answers_are_dead_letters_with_their_reason(
    receiver: Receiver, tmp_path: Path, status: int
) -> None:
    receiver.default = answer(status, "  rejected:\n" + "x" * 500)
    metrics = Metrics()
    # 401, 403 and 404 are first retried for retry_rejected_for_s: 0 makes them dead at once.
    window = {"retry_rejected_for_s": 0} if status in (401, 403, 404) else {}
    sink = await open_sink(
        settings(tmp_path, target("crm", receiver.url, receiver.secret, **window)), metrics
    )
    try:
        event = make_event()
        await sink.append(event)
        await eventually(
            lambda: sample(metrics, "lpr_webhook_dead_letters_total", target="crm") == 1,
            10,
            "dead letter",
        )
        (dead,) = await sink.dead_letters()
    finally:
        await sink.close()
    assert len(receiver.requests) == 1  # never retried
    assert dead.event_id == event.event_id and dead.target == "crm"
    assert dead.reason == f"HTTP {status}: rejected: " + "x" * 190  # first 200 characters


async def test_crop_as_base64_url_or_none(receiver: Receiver, tmp_path: Path) -> None:
    base = "https://lpr.example.com/"
    config = settings(
        tmp_path,
        target("inline", receiver.url.replace("/hook", "/inline"), receiver.secret),
        target(
            "linked",
            receiver.url.replace("/hook", "/linked"),
            receiver.secret,
            crop="url",
            public_base_url=base,
        ),
        target("none", receiver.url.replace("/hook", "/none"), receiver.secret, crop="none"),
    )
    sink = await open_sink(config)
    try:
        event = make_event()
        await sink.append(event)
        await eventually(lambda: len(receiver.delivered()) == 3, 10, "three deliveries")
        assert await sink.outbox.crop(event.event_id) == event.crop_jpeg  # to be served
    finally:
        await sink.close()
    (inline,) = receiver.delivered("/inline")
    (linked,) = receiver.delivered("/linked")
    (without,) = receiver.delivered("/none")
    expected = event.to_dict(include_crop=False)
    assert inline.payload == event.to_dict(include_crop=True)
    assert base64.b64decode(inline.payload["crop_jpeg_base64"]) == event.crop_jpeg
    assert linked.payload == {
        **expected,
        "crop_url": f"https://lpr.example.com/api/events/{event.event_id}/crop.jpg",
    }
    assert without.payload == expected
    assert all(r.enveloped for r in (inline, linked, without))
    assert picture_urls("http://h:8080/lpr", "x", None, frame=False) == {
        "crop_url": "http://h:8080/lpr/api/events/x/crop.jpg"
    }
    links = PictureLinks(b"k" * 32, ttl_s=60)
    signed = picture_urls("http://h:8080/lpr/", "x.v2", links, frame=True)
    assert set(signed) == {"crop_url", "frame_url"}
    for picture, url in (("crop", signed["crop_url"]), ("frame", signed["frame_url"])):
        path, _, query = url.removeprefix("http://h:8080/lpr").partition("?")
        assert path == f"/api/events/x.v2/{picture}.jpg"
        fields = dict(part.split("=") for part in query.split("&"))
        links.check(path, fields["expires"], fields["sig"])  # raises when not valid


async def test_the_event_in_the_envelope_by_default_or_bare(
    receiver: Receiver, tmp_path: Path
) -> None:
    config = settings(
        tmp_path,
        target("enveloped", receiver.url.replace("/hook", "/enveloped"), receiver.secret),
        target("bare", receiver.url.replace("/hook", "/bare"), receiver.secret, payload="bare"),
    )
    assert config.webhooks[0].payload == "envelope"
    first = make_event()
    update = dataclasses.replace(first, version=2, previous_text=first.text, text="O567AM76")
    sink = await open_sink(config)
    try:
        before = datetime.now(UTC)
        await sink.append(first)
        await sink.append(update)
        after = datetime.now(UTC)
        await eventually(lambda: len(receiver.delivered()) == 4, 10, "four deliveries")
    finally:
        await sink.close()
    events = [first.to_dict(include_crop=True), update.to_dict(include_crop=True)]
    enveloped = receiver.delivered("/enveloped")
    assert [r.webhook_id for r in enveloped] == [first.event_id, f"{first.event_id}.v2"]
    bodies = [r.body_json for r in enveloped]
    assert [set(b) for b in bodies] == [{"type", "timestamp", "data"}] * 2
    assert [b["type"] for b in bodies] == ["plate", "plate.updated"]
    assert [b["data"] for b in bodies] == events
    # When each version was decided (stored in the outbox): UTC, ISO 8601, in order.
    stamps = [datetime.fromisoformat(b["timestamp"]) for b in bodies]
    assert all(s.utcoffset() == timedelta(0) for s in stamps)
    assert before - timedelta(milliseconds=1) <= stamps[0] <= stamps[1] <= after
    assert [r.body_json for r in receiver.delivered("/bare")] == events
