"""Webhook delivery against a real HTTP receiver on 127.0.0.1 (tests/webhook_receiver.py).

Nothing of streamer.delivery.webhooks or streamer.delivery.outbox is mocked: events go through
the SQLite
outbox and aiohttp to an aiohttp server that verifies every signature with the
``standardwebhooks`` library. The acceptance test with the receiver down for 60 s
takes a minute (``LPR_TEST_WEBHOOK_DOWN_S`` shortens it for a quick local run); the
others take a few seconds at most.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import signal
import sys
import textwrap
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import generate_latest
from standardwebhooks import Webhook, WebhookVerificationError

from streamer.cli import deadletters as outbox_cli
from streamer.config.schema import (
    CameraConfig,
    ConfigError,
    OutboxConfig,
    Settings,
    WebhookTargetConfig,
    load_config,
)
from streamer.delivery.events import PlateEvent, build_event
from streamer.delivery.outbox import Outbox, OutboxError
from streamer.delivery.webhooks import (
    USER_AGENT,
    WebhookSink,
    backoff_delay,
    create_webhook_sink,
    crop_url,
    retry_after_seconds,
)
from streamer.domain.frames import Frame, FrameResult, PlateReading
from streamer.ops.metrics import Metrics
from streamer.tracking.passes import PassDetector
from tests.webhook_receiver import (
    Receiver,
    answer,
    eventually,
    free_port,
    make_event,
    new_secret,
    slow,
)

PROJECT = Path(__file__).resolve().parents[3]
DOWN_S = float(os.environ.get("LPR_TEST_WEBHOOK_DOWN_S", "60"))
#: Options for the sink in tests: look at the outbox often, close quickly.
FAST = {"poll_interval_s": 0.2, "close_timeout_s": 1.0, "outbox_error_delay_s": 0.2}


def target(name: str, url: str, secret: str, **fields: Any) -> WebhookTargetConfig:
    fields.setdefault("retry_initial_delay_s", 0.05)
    fields.setdefault("retry_max_delay_s", 0.2)
    fields.setdefault("timeout_s", 2.0)
    return WebhookTargetConfig(name=name, url=url, secret=secret, **fields)


def settings(tmp_path: Path, *targets: WebhookTargetConfig, **outbox: Any) -> Settings:
    return Settings(
        cameras=[CameraConfig(name="gate", url="rtsp://cam/x")],
        webhooks=list(targets),
        outbox=OutboxConfig(path=tmp_path / "outbox.sqlite3", **outbox),
    )


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rx = await Receiver(new_secret()).start()
    try:
        yield rx
    finally:
        await rx.stop()


async def open_sink(
    config: Settings, metrics: Metrics | None = None, **options: Any
) -> WebhookSink:
    sink = await create_webhook_sink(config, metrics or Metrics(), **{**FAST, **options})
    assert sink is not None
    return sink


def assert_in_camera_order(received_ids: list[str], published: list[PlateEvent]) -> None:
    position = {event_id: i for i, event_id in enumerate(received_ids)}
    for camera in {e.camera for e in published}:
        sent = [e.event_id for e in published if e.camera == camera]
        assert sorted(sent, key=position.__getitem__) == sent, f"camera {camera} out of order"


# --------------------------------------------------------------------------- acceptance


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
            await sink.publish(event)
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


async def test_receiver_down_for_60_s_then_back_gets_all_50_once_in_order(
    tmp_path: Path,
) -> None:
    timings = await receiver_down_then_back(tmp_path, DOWN_S)
    # Backoff is capped at 2 s: the backlog drains within seconds of the return.
    assert timings["catch_up_s"] < 15, timings


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
            await sink.publish(await build_event(plate_pass, jpeg_quality=90))
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
        await sink.publish(event)
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
        await sink.publish(make_event())
        took = await eventually(lambda: len(receiver.delivered()) == 1, 10, "delivery")
    finally:
        await sink.close()
    assert 0.45 <= receiver.requests[1].at - receiver.requests[0].at < 3.0
    assert took < 5


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
        await sink.publish(make_event())
        await eventually(lambda: len(receiver.delivered()) == 1, 10, "delivery")
    finally:
        await sink.close()
    assert [r.status for r in receiver.requests] == [status, 200]
    assert sample(metrics, "lpr_webhook_retries_total", target="crm") == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 422, 301])
async def test_other_answers_are_dead_letters_with_their_reason(
    receiver: Receiver, tmp_path: Path, status: int
) -> None:
    receiver.default = answer(status, "  rejected:\n" + "x" * 500)
    metrics = Metrics()
    sink = await open_sink(
        settings(tmp_path, target("crm", receiver.url, receiver.secret)), metrics
    )
    try:
        event = make_event()
        await sink.publish(event)
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


async def test_400_is_a_dead_letter_listed_and_redriven_by_the_cli(
    receiver: Receiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("WEBHOOK_SECRET", receiver.secret)
    config_path = tmp_path / "site.yaml"
    config_path.write_text(
        textwrap.dedent(
            f"""
            cameras: [{{name: gate, url: rtsp://cam/x}}]
            webhooks:
              - name: crm
                url: {receiver.url}
                secret: ${{WEBHOOK_SECRET}}
                retry_initial_delay_s: 0.05
                retry_max_delay_s: 0.2
            outbox:
              path: data/outbox.sqlite3
            """
        )
    )
    config = load_config(config_path)
    assert config.outbox.path == tmp_path / "data" / "outbox.sqlite3"
    rejected, accepted = make_event("gate"), make_event("gate")

    accept_all = False

    async def by_event(received: Any) -> Any:
        if received.webhook_id == rejected.event_id and not accept_all:
            return await answer(400, "unknown plate format")(received)
        return await answer(200)(received)

    receiver.default = by_event
    metrics = Metrics()
    sink = await open_sink(config, metrics)
    try:
        await sink.publish(rejected)
        await sink.publish(accepted)
        # The dead letter does not hold up the camera's next event.
        await eventually(lambda: accepted.event_id in receiver.delivered_ids(), 10, "next event")
        assert await sink.outbox.state(rejected.event_id, "crm") == "dead"
        assert sample(metrics, "lpr_webhook_dead_letters_total", target="crm") == 1

        capsys.readouterr()
        argv = ["deadletters", "list", "--config", str(config_path)]
        assert await asyncio.to_thread(outbox_cli.main, argv) == 0
        out = capsys.readouterr().out
        assert rejected.event_id in out and "HTTP 400: unknown plate format" in out
        assert accepted.event_id not in out and "1 dead letter(s)" in out
        assert receiver.secret not in out

        accept_all = True
        argv = [
            "deadletters",
            "redrive",
            "--config",
            str(config_path),
            "--event-id",
            rejected.event_id,
        ]
        assert await asyncio.to_thread(outbox_cli.main, argv) == 0
        assert "re-driven: 1 dead letter(s)" in capsys.readouterr().out
        # The running service picks the re-driven event up (it polls the outbox).
        await eventually(lambda: rejected.event_id in receiver.delivered_ids(), 10, "re-drive")

        argv = ["deadletters", "list", "--config", str(config_path), "--target", "crm"]
        assert await asyncio.to_thread(outbox_cli.main, argv) == 0
        assert "no dead letters" in capsys.readouterr().out
        argv = ["deadletters", "redrive", "--config", str(config_path), "--event-id", "nope"]
        assert await asyncio.to_thread(outbox_cli.main, argv) == 1
        assert "not a dead letter: nope" in capsys.readouterr().err
        argv = ["deadletters", "redrive", "--config", str(config_path), "--all"]
        assert await asyncio.to_thread(outbox_cli.main, argv) == 0
        assert "re-driven: 0" in capsys.readouterr().out
    finally:
        await sink.close()
    assert receiver.delivered_ids().count(rejected.event_id) == 1


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cameras: [{name: gate, url: rtsp://cam/x}]\nwebhooks: [{name: x}]\n")
    assert outbox_cli.main(["deadletters", "list", "--config", str(bad)]) == 2
    assert "webhooks[x].url: required key is missing" in capsys.readouterr().err
    good = tmp_path / "good.yaml"
    good.write_text("cameras: [{name: gate, url: rtsp://cam/x}]\n")
    assert outbox_cli.main(["deadletters", "list", "--config", str(good)]) == 1
    assert "no outbox at" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()  # the CLI never creates an outbox
    assert outbox_cli.main(["deadletters", "redrive", "--config", str(good)]) == 2
    assert outbox_cli.main(["deadletters"]) == 2


async def test_redrive_through_the_sink_wakes_the_worker(
    receiver: Receiver, tmp_path: Path
) -> None:
    receiver.script = [answer(400, "no")]
    sink = await open_sink(
        settings(tmp_path, target("crm", receiver.url, receiver.secret)), poll_interval_s=30.0
    )
    try:
        event = make_event()
        await sink.publish(event)
        await eventually(
            lambda: len(receiver.requests) == 1 and receiver.requests[0].status == 400, 10, "400"
        )
        await asyncio.sleep(0.5)  # no polling within 30 s: only redrive() wakes it
        assert len(receiver.requests) == 1
        assert await sink.redrive([event.event_id]) == 1
        await eventually(lambda: len(receiver.delivered()) == 1, 5, "re-drive without polling")
    finally:
        await sink.close()


KILL_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    sys.path.insert(0, sys.argv[1])
    from tests.webhook_receiver import make_event
    from streamer.config.schema import CameraConfig, OutboxConfig, Settings, WebhookTargetConfig
    from streamer.ops.metrics import Metrics
    from streamer.delivery.webhooks import create_webhook_sink

    async def main():
        url, db, secret, count = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
        settings = Settings(
            cameras=[CameraConfig(name="gate", url="rtsp://cam/x")],
            webhooks=[WebhookTargetConfig(name="crm", url=url, secret=secret, timeout_s=30,
                                          retry_initial_delay_s=0.2, retry_max_delay_s=0.5)],
            outbox=OutboxConfig(path=db),
        )
        sink = await create_webhook_sink(settings, Metrics(), poll_interval_s=0.2)
        for i in range(count):
            event = make_event(("gate", "yard", "exit")[i % 3])
            await sink.publish(event)
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


async def test_signatures_verify_and_tampering_fails(
    receiver: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    config = settings(tmp_path, target("crm", receiver.url, receiver.secret))
    with caplog.at_level(logging.DEBUG):
        sink = await open_sink(config, metrics)
        try:
            event = make_event()
            await sink.publish(event)
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
    assert Webhook(receiver.secret).verify(request.body, headers) == request.payload

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
    sink = await open_sink(settings(tmp_path, target("crm", receiver.url, new_secret())))
    try:
        await sink.publish(make_event())
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
    assert [d.reason for d in dead] == ["HTTP 401: bad signature"]  # not retried


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
            await sink.publish(event)
            sent_at[event.event_id] = time.monotonic()
            published.append(event)
            await asyncio.sleep(0.02)
        await eventually(lambda: len(receiver.delivered()) == 20, 5, "healthy target")
        latency = max(r.at - sent_at[r.webhook_id] for r in receiver.delivered())
        assert latency < 1.0  # on time, whatever the other target does
        await sink.refresh_metrics()
        assert sample(metrics, "lpr_outbox_depth", target="up") == 0
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
        target("bare", receiver.url.replace("/hook", "/bare"), receiver.secret, crop="none"),
    )
    sink = await open_sink(config)
    try:
        event = make_event()
        await sink.publish(event)
        await eventually(lambda: len(receiver.delivered()) == 3, 10, "three deliveries")
        assert await sink.outbox.crop(event.event_id) == event.crop_jpeg  # to be served
    finally:
        await sink.close()
    (inline,) = receiver.delivered("/inline")
    (linked,) = receiver.delivered("/linked")
    (bare,) = receiver.delivered("/bare")
    expected = event.to_dict(include_crop=False)
    assert inline.payload == event.to_dict(include_crop=True)
    assert base64.b64decode(inline.payload["crop_jpeg_base64"]) == event.crop_jpeg
    assert linked.payload == {
        **expected,
        "crop_url": f"https://lpr.example.com/api/events/{event.event_id}/crop.jpg",
    }
    assert bare.payload == expected
    assert crop_url("http://h:8080/lpr", "x") == "http://h:8080/lpr/api/events/x/crop.jpg"


async def test_full_disk_makes_publish_fail_loudly(receiver: Receiver, tmp_path: Path) -> None:
    metrics = Metrics()
    sink = await open_sink(
        settings(tmp_path, target("crm", receiver.url, receiver.secret)), metrics
    )
    try:
        await sink.publish(make_event())
        assert sink.healthy
        outbox = sink.outbox
        pages = await outbox._call(lambda c: c.execute("PRAGMA page_count").fetchone()[0], "t")
        await outbox._call(lambda c: c.execute(f"PRAGMA max_page_count={pages}"), "test")
        big = make_event()
        big = PlateEvent(**{**big.__dict__, "crop_jpeg": b"\xff" * 300_000})
        with pytest.raises(OutboxError, match="database or disk is full"):
            await sink.publish(big)  # never a silent loss: the caller knows
        assert not sink.healthy
        assert sample(metrics, "lpr_outbox_errors_total") >= 1
        await outbox._call(lambda c: c.execute("PRAGMA max_page_count=1073741823"), "test")
        await sink.publish(big)
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
        await sink.publish(event)
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
    await sink.publish(event)
    await eventually(lambda: len(receiver.requests) == 1, 5, "POST in flight")
    started = time.monotonic()
    await asyncio.gather(sink.close(), sink.close())  # idempotent, concurrent
    assert time.monotonic() - started < 3
    await sink.close()
    assert not sink.healthy
    with pytest.raises(RuntimeError, match="closed"):
        await sink.publish(make_event())
    # Still pending: the next start delivers it.
    again = await open_sink(config)
    try:
        await eventually(lambda: event.event_id in receiver.delivered_ids(), 5, "redelivery")
    finally:
        await again.close()
    tasks = {t.get_name() for t in asyncio.all_tasks()}
    assert not any(name.startswith("webhook-") for name in tasks)


async def test_no_sink_without_enabled_targets(tmp_path: Path) -> None:
    secret = new_secret()
    assert await create_webhook_sink(settings(tmp_path), Metrics()) is None
    disabled = target("off", "http://127.0.0.1:9/x", secret, enabled=False)
    assert await create_webhook_sink(settings(tmp_path, disabled), Metrics()) is None
    assert not (tmp_path / "outbox.sqlite3").exists()


# --------------------------------------------------------------------------- policy helpers


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


# --------------------------------------------------------------------------- config


def config_error(tmp_path: Path, webhooks: str, env: dict[str, str] | None = None) -> str:
    path = tmp_path / "site.yaml"
    path.write_text(f"cameras: [{{name: gate, url: rtsp://cam/x}}]\n{webhooks}")
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env or {})
    return str(info.value)


def test_config_loads_targets_with_secret_from_the_environment(tmp_path: Path) -> None:
    secret = new_secret()
    path = tmp_path / "conf" / "site.yaml"
    path.parent.mkdir()
    path.write_text(
        "cameras: [{name: gate, url: rtsp://cam/x}]\n"
        "webhooks:\n"
        "  - {name: crm, url: 'https://user:pw@crm.example.com/hook?token=t0k', "
        "secret: '${WEBHOOK_SECRET}'}\n"
        "  - {name: erp, url: 'http://erp:8080/in', secret: '${WEBHOOK_SECRET}', crop: url, "
        "public_base_url: 'https://lpr.example.com/', enabled: false}\n"
    )
    loaded = load_config(path, env={"WEBHOOK_SECRET": secret})
    crm, erp = loaded.webhooks
    assert crm.secret.get_secret_value() == secret
    assert (crm.timeout_s, crm.max_concurrency, crm.crop, crm.enabled) == (10, 4, "base64", True)
    assert (crm.retry_initial_delay_s, crm.retry_max_delay_s, crm.retry_after_max_s) == (1, 60, 600)
    assert erp.public_base_url == "https://lpr.example.com" and not erp.enabled
    assert loaded.outbox.path == path.parent / "data" / "outbox.sqlite3"  # the config's folder
    assert loaded.outbox.retention_s == 7 * 86400 and loaded.outbox.prune_interval_s == 600
    for text in (repr(loaded), str(loaded), json.dumps(loaded.redacted()), repr(crm)):
        assert secret not in text and "pw@" not in text and "t0k" not in text
    assert (
        loaded.redacted()["webhooks"][0]["url"] == "https://***:***@crm.example.com/hook?token=***"
    )
    # Built in code (no config file), the default path stays relative.
    assert settings(tmp_path).webhooks == []
    assert Settings(cameras=[CameraConfig(name="a", url="x.ts")]).outbox.path == Path(
        "data/outbox.sqlite3"
    )


@pytest.mark.parametrize(
    ("secret", "expected"),
    [
        ("c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0", "does not start with 'whsec_'"),
        ("whsec_not base64!!", "is not base64"),
        ("whsec_" + base64.b64encode(b"short").decode(), "holds 5 bytes"),
        ("whsec_" + base64.b64encode(bytes(65)).decode(), "holds 65 bytes"),
    ],
)
def test_bad_secrets_are_rejected_without_being_shown(
    tmp_path: Path, secret: str, expected: str
) -> None:
    message = config_error(
        tmp_path,
        "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}'}]\n",
        env={"S": secret},
    )
    assert "webhooks[crm].secret" in message and expected in message
    assert "whsec_'+base64.b64encode(os.urandom(24))" in message  # how to make one
    assert secret not in message and secret.removeprefix("whsec_") not in message


@pytest.mark.parametrize(
    ("webhooks", "expected"),
    [
        (
            "webhooks: [{name: crm, url: 'ftp://h/x', secret: '${S}'}]",
            "webhooks[crm].url: the webhook URL must start with http:// or https://",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}', crop: url}]",
            "webhooks[crm].public_base_url: required when crop is url",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}', crop: jpeg}]",
            "webhooks[crm].crop: Input should be 'base64', 'url' or 'none'",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}'},"
            " {name: crm, url: 'https://h/y', secret: '${S}'}]",
            "webhooks[0] and webhooks[1] are both named 'crm'",
        ),
        (
            "webhooks: [{name: CRM!, url: 'https://h/x', secret: '${S}'}]",
            "target name 'CRM!' is not allowed",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}', retry_max_delay_s: 0.5}]",
            "webhooks[crm].retry_max_delay_s: must be >= retry_initial_delay_s (1), got 0.5",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x', secret: '${S}', timeoutt_s: 1}]",
            "webhooks[crm].timeoutt_s: unknown key; did you mean 'timeout_s'?",
        ),
        (
            "webhooks: [{name: crm, url: 'https://h/x'}]",
            "webhooks[crm].secret: required key is missing",
        ),
        ("outbox: {retention_s: -1}", "outbox.retention_s: Input should be greater than or equal"),
        ("outbox: {prune_interval_s: 0}", "outbox.prune_interval_s: Input should be greater"),
    ],
)
def test_bad_webhook_config(tmp_path: Path, webhooks: str, expected: str) -> None:
    secret = new_secret()
    message = config_error(tmp_path, webhooks + "\n", env={"S": secret})
    assert expected in message
    assert secret not in message


def test_reference_config_and_docs_cover_the_new_keys() -> None:
    import re

    reference = (PROJECT / "configs" / "reference.yaml").read_text()
    docs = (PROJECT / "docs" / "config.md").read_text()
    for model in (WebhookTargetConfig, OutboxConfig):
        for name, field in model.model_fields.items():
            assert field.description, name
            # The example target is commented out (it needs a receiver and a secret).
            assert re.search(rf"^\s*#?\s*(- )?{name}:", reference, re.MULTILINE), name
            assert f"`{name}`" in docs, name
    assert "${WEBHOOK_SECRET}" in reference
    settings = load_config(PROJECT / "configs" / "reference.yaml", env={"CAM_PASSWORD": "x"})
    assert settings.webhooks == []
    assert settings.outbox.retention_s == OutboxConfig().retention_s
    assert settings.outbox.path == PROJECT / "configs" / "data" / "outbox.sqlite3"


async def test_outbox_is_shared_between_two_processes_safely(tmp_path: Path) -> None:
    """The CLI (another connection) and the service's outbox at once: WAL, no lock errors."""
    path = tmp_path / "outbox.sqlite3"
    first = await Outbox.open(path, ["a"])
    second = await Outbox.open(path, ["a"], create=False)
    try:
        events = [make_event() for _ in range(20)]
        await asyncio.gather(
            *(first.add(e) for e in events[:10]), *(second.add(e) for e in events[10:])
        )
        assert (await first.stats("a")).depth == 20
        for e in events:
            await second.mark_dead(e.event_id, "a", "HTTP 400")
        assert await first.redrive() == 20
    finally:
        await first.close()
        await second.close()
