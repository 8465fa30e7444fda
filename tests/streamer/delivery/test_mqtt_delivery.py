"""Events from the outbox to a real Mosquitto broker (tests/mqtt_broker.py), checked with
Mosquitto's own clients: topics and payloads, retained ``last`` and ``status``, the will,
nothing lost while the broker is down (20 s in the suite; the acceptance's 60 s with
``LPR_TEST_MQTT_DOWN_S=60``, as the webhook outage test) or after a kill -9, per-camera
order, a refused password, TLS, MQTT 3.1.1."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from streamer.config import CameraConfig, MqttConfig, OutboxConfig, Settings
from streamer.delivery.consumers import Consumers
from streamer.delivery.events import PlateEvent, Sighting
from streamer.delivery.publisher import EventPublisher
from streamer.foundation.metrics import Metrics
from streamer.ops import health
from tests.mqtt_broker import Broker, Message, Subscriber, make_test_ca, retained
from tests.streamer.delivery.webhook_setup import (
    FAST,
    assert_in_camera_order,
    open_consumers,
    sample,
    settled_depth,
)
from tests.webhook_receiver import eventually, make_event

PROJECT = Path(__file__).resolve().parents[3]
DOWN_S = float(os.environ.get("LPR_TEST_MQTT_DOWN_S", "20"))
CAMERAS = ("gate", "yard", "exit")


def mqtt_settings(tmp_path: Path, broker: Broker, **mqtt: Any) -> Settings:
    mqtt.setdefault("retry_initial_delay_s", 0.2)
    mqtt.setdefault("retry_max_delay_s", 1.0)
    mqtt.setdefault("timeout_s", 3.0)
    mqtt.setdefault("client_id", "lpr-test")
    # The topics of an installation of its own (test_home_assistant.py has the default's).
    mqtt.setdefault("topic_prefix", "lpr")
    mqtt.setdefault("discovery", {"node_id": "lpr"})
    return Settings(
        cameras=[CameraConfig(name=name, url="rtsp://cam/x") for name in CAMERAS],
        mqtt=MqttConfig(host=broker.host, port=broker.port, **mqtt),
        outbox=OutboxConfig(path=tmp_path / "outbox.sqlite3"),
    )


async def open_mqtt_sink(settings: Settings, metrics: Metrics | None = None) -> Consumers:
    sink = await open_consumers(settings, metrics or Metrics(), **FAST)
    assert sink is not None
    return sink


def plates(subscriber: Subscriber) -> list[Message]:
    return [m for m in subscriber.messages if m.topic.endswith("/plate")]


def seen_ids(subscriber: Subscriber) -> list[str]:
    return [m.json()["event_id"] for m in plates(subscriber)]


def readiness(sink: Consumers) -> health.Report:
    """What ``/readyz`` says of the sink (no Triton, no camera here)."""
    publisher = EventPublisher(sink.metrics, jpeg_quality=90, queue_max_bytes=2**20)
    publisher.log = sink
    return health.readiness(
        recognizer=None,
        watchdog=None,
        supervisor=sink.supervisor,
        publisher=publisher,
        consumers=sink,
        cameras=[],
    )


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    with Broker(tmp_path / "broker") as running:
        running.start()
        yield running


async def test_events_go_to_their_topics_and_last_and_status_are_retained(
    broker: Broker, tmp_path: Path
) -> None:
    subscriber = Subscriber(broker, "lpr/#").start()
    metrics = Metrics()
    sink = await open_mqtt_sink(mqtt_settings(tmp_path, broker), metrics)
    events = [make_event(CAMERAS[i % 2]) for i in range(5)]
    alert = dataclasses.replace(
        make_event("yard"), alert=True, match={"label": "staff", "plate": "A9", "distance": 0}
    )
    correction = dataclasses.replace(events[0], version=2, previous_text="X", text="A000ZZ77")
    published = [*events, alert, correction]
    try:
        for event in published:
            await sink.append(event)
        await subscriber.wait_for_async(lambda m: len(plates(subscriber)) == 7, 15)
        assert sink.healthy and sink.problem is None
        assert sample(metrics, "lpr_mqtt_connected") == 1
        await eventually(
            lambda: sample(metrics, "lpr_mqtt_deliveries_total", outcome="delivered") == 7,
            5,
            "7 counted",
        )
    finally:
        await sink.close()
        subscriber.stop()

    by_id: dict[tuple[str, int], dict[str, Any]] = {}
    for message in plates(subscriber):
        payload = message.json()
        assert message.topic == f"lpr/{payload['camera']}/plate" and message.qos == 1
        by_id[payload["event_id"], payload["version"]] = payload
    for event in published:
        # The payload a webhook gets with crop: none, field for field.
        assert by_id[event.event_id, event.version] == event.to_dict(include_crop=False)
    for camera in ("gate", "yard"):  # per camera: in the order published, correction last
        got = [(p["event_id"], p["version"]) for p in map(Message.json, plates(subscriber))]
        sent = [(e.event_id, e.version) for e in published if e.camera == camera]
        assert [key for key in got if key in sent] == sent
    alerts = [m.json() for m in subscriber.on("lpr/yard/alert")]
    assert [a["event_id"] for a in alerts] == [alert.event_id] and alerts[0]["alert"] is True

    held = retained(broker, "lpr/#")
    assert held["lpr/status"] == b"offline"  # closed: said so, retained
    # yard's latest pass; gate's last is events[4], so the correction of events[0] (an older
    # pass) does not replace it
    assert json.loads(held["lpr/yard/last"])["event_id"] == alert.event_id
    assert json.loads(held["lpr/gate/last"])["event_id"] == events[4].event_id
    assert "lpr/exit/last" not in held


async def test_the_will_says_offline_when_the_service_dies(broker: Broker, tmp_path: Path) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        KILL_CHILD,
        str(PROJECT),
        str(broker.port),
        str(tmp_path / "outbox.sqlite3"),
        "0",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=PROJECT,
    )
    try:
        await eventually(
            lambda: retained(broker, "lpr/status").get("lpr/status") == b"online", 20, "online"
        )
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    # keepalive_s 5: the broker gives up on the client after 1.5 x 5 s, or at once when the
    # kernel closes the socket; either way the will is published, retained.
    await eventually(
        lambda: retained(broker, "lpr/status").get("lpr/status") == b"offline", 15, "offline"
    )


async def test_broker_down_then_back_delivers_every_event_in_camera_order(
    tmp_path: Path,
) -> None:
    """50 events from 3 cameras while the broker is stopped for ``DOWN_S``; then it runs again
    on the same port and every event arrives, oldest first per camera."""
    with Broker(tmp_path / "broker", persistence=True) as broker:
        broker.start()
        # A persistent session: the broker queues what is published before the subscriber
        # is back from the restart.
        subscriber = Subscriber(broker, "lpr/+/plate", persistent=True).start()
        metrics = Metrics()
        sink = await open_mqtt_sink(mqtt_settings(tmp_path, broker), metrics)
        published: list[PlateEvent] = []
        try:
            await eventually(lambda: sink.deliverers[0].ready, 10, "connected")
            broker.stop()
            await eventually(lambda: sink.problem is not None, 10, "the outage noticed")
            assert "mqtt 127.0.0.1:" in (sink.problem or "") and not sink.healthy
            start = time.monotonic()
            for i in range(50):
                event = make_event(CAMERAS[i % 3])
                await sink.append(event)
                published.append(event)
                await asyncio.sleep(
                    max(0.0, start + (i + 1) * DOWN_S * 0.8 / 50 - time.monotonic())
                )
            await asyncio.sleep(max(0.0, start + DOWN_S - time.monotonic()))
            await sink.refresh_metrics()
            assert sample(metrics, "lpr_outbox_depth", target="mqtt") == 50
            assert sample(metrics, "lpr_outbox_oldest_undelivered_age_seconds", target="mqtt") >= (
                DOWN_S * 0.9
            )
            assert sample(metrics, "lpr_mqtt_connected") == 0
            assert sample(metrics, "lpr_mqtt_connection_failures_total", reason="unreachable") >= 2

            broker.start()  # back, on the same port
            back = time.monotonic()
            await subscriber.wait_for_async(
                lambda m: {e.event_id for e in published} <= set(seen_ids(subscriber)), 30
            )
            catch_up = time.monotonic() - back
            await eventually(lambda: sink.problem is None, 5, "the problem cleared")
            assert await settled_depth(sink, metrics, "mqtt", 0) == 0
        finally:
            await sink.close()
            subscriber.stop()
    assert_in_camera_order(seen_ids(subscriber), published)
    # The backlog went as soon as the broker was back (not after its backoff of up to 1 s).
    assert catch_up < 15


KILL_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    sys.path.insert(0, sys.argv[1])
    from tests.webhook_receiver import make_event
    from streamer.config import CameraConfig, MqttConfig, OutboxConfig, Settings
    from streamer.foundation.metrics import Metrics
    from tests.streamer.delivery.webhook_setup import open_consumers

    async def main():
        port, db, count = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
        settings = Settings(
            cameras=[CameraConfig(name=n, url="rtsp://cam/x") for n in ("gate", "yard", "exit")],
            mqtt=MqttConfig(host="127.0.0.1", port=port, client_id="lpr-child", keepalive_s=5,
                            topic_prefix="lpr", discovery={"node_id": "lpr"},
                            retry_initial_delay_s=0.2, retry_max_delay_s=0.5),
            outbox=OutboxConfig(path=db),
        )
        sink = await open_consumers(settings, Metrics(), poll_interval_s=0.2)
        for batch in range(2):
            for i in range(count):
                event = make_event(("gate", "yard", "exit")[i % 3])
                await sink.append(event)
                print(json.dumps({"event_id": event.event_id, "camera": event.camera}), flush=True)
            print("published", flush=True)
            await asyncio.to_thread(sys.stdin.readline)  # the test says: go on
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def test_kill_9_with_events_pending_then_restart_delivers_every_event(
    tmp_path: Path,
) -> None:
    """A process publishes 15 events (delivered), then 15 more with the broker stopped, and is
    killed (-9); the broker comes back and a new sink on the same outbox delivers them."""
    db = tmp_path / "outbox.sqlite3"
    with Broker(tmp_path / "broker") as broker:
        broker.start()
        subscriber = Subscriber(broker, "lpr/+/plate").start()
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            KILL_CHILD,
            str(PROJECT),
            str(broker.port),
            str(db),
            "15",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=PROJECT,
        )
        published: list[str] = []
        try:
            assert child.stdout is not None and child.stdin is not None

            async def read_batch() -> None:
                while True:
                    line = (await asyncio.wait_for(child.stdout.readline(), 60)).decode().strip()
                    assert line, "the child ended early"
                    if line == "published":
                        return
                    published.append(json.loads(line)["event_id"])

            await read_batch()
            await subscriber.wait_for_async(lambda m: len(plates(subscriber)) >= 15, 20)
            broker.stop()
            child.stdin.write(b"go\n")
            await child.stdin.drain()
            await read_batch()
        finally:
            child.send_signal(signal.SIGKILL)
            await child.wait()
        assert child.returncode == -signal.SIGKILL and len(published) == 30
        assert len(set(seen_ids(subscriber))) == 15  # the other 15 were pending at the kill

        broker.start()
        subscriber.wait_subscribed(count=2)  # it reconnected and subscribed again
        restarted = await open_mqtt_sink(mqtt_settings(tmp_path, broker))
        try:
            await subscriber.wait_for_async(
                lambda m: set(published) <= set(seen_ids(subscriber)), 20
            )
            for _ in range(50):  # the last acknowledgement is recorded just after it arrived
                if (await restarted.outbox.stats("mqtt")).depth == 0:
                    break
                await asyncio.sleep(0.1)
            assert (await restarted.outbox.stats("mqtt")).depth == 0
        finally:
            await restarted.close()
            subscriber.stop()
    ids = seen_ids(subscriber)
    assert set(ids) == set(published)  # a duplicate, if any, has the same event_id
    by_camera: dict[str, list[str]] = {}
    for message in plates(subscriber):
        by_camera.setdefault(message.json()["camera"], []).append(message.json()["event_id"])
    order = {event_id: i for i, event_id in enumerate(published)}
    for camera, received in by_camera.items():
        firsts = list(dict.fromkeys(received))
        assert firsts == sorted(firsts, key=order.__getitem__), f"{camera} out of order"


async def test_a_refused_password_is_one_log_line_and_a_readiness_reason_then_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    password = "wrong-but-secret-pw-42"
    with Broker(tmp_path / "broker", users={"lpr": "right-pw", "test": "test-pw"}) as broker:
        broker.start()
        subscriber = Subscriber(broker, "lpr/+/plate", username="test", password="test-pw")
        subscriber.start()
        metrics = Metrics()
        caplog.set_level(logging.INFO)
        settings = mqtt_settings(tmp_path, broker, username="lpr", password=password)
        sink = await open_mqtt_sink(settings, metrics)
        try:
            event = make_event("gate")
            await sink.append(event)
            await eventually(
                lambda: (
                    sample(metrics, "lpr_mqtt_connection_failures_total", reason="refused") >= 3
                ),
                20,
                "three refused connects",
            )
            problem = sink.problem or ""
            assert problem.startswith(f"mqtt 127.0.0.1:{broker.port}: the broker refused")
            assert not sink.healthy
            ready, details = readiness(sink)
            assert not ready and details["sinks"] == {"outbox": problem}
            refused = [r for r in caplog.records if "refused" in r.getMessage()]
            assert len(refused) == 1, [r.getMessage() for r in refused]  # one line, not a loop
            assert f"127.0.0.1:{broker.port}" in refused[0].getMessage()

            broker.set_password("lpr", password)  # the broker now takes it
            await subscriber.wait_for_async(lambda m: seen_ids(subscriber) == [event.event_id], 20)
            await eventually(lambda: sink.healthy, 5, "healthy again")
            assert readiness(sink)[1]["sinks"] == "ok"
            scrape = generate_latest(metrics.registry).decode()
        finally:
            await sink.close()
            subscriber.stop()
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("mqtt_connection")]
    assert lines[0].endswith("refused the connection: Not authorized; retrying with backoff")
    assert lines[1] == f"mqtt 127.0.0.1:{broker.port}: connected (MQTT 5)"
    for record in caplog.records:
        assert password not in record.getMessage()
    assert (
        password not in scrape
        and password not in repr(settings)
        and password not in str(settings.redacted())
    )


async def test_tls_with_a_client_certificate_and_a_test_ca(tmp_path: Path) -> None:
    files = make_test_ca(tmp_path / "ca")
    with Broker(tmp_path / "broker", tls=files, require_client_cert=True) as broker:
        broker.start()
        subscriber = Subscriber(broker, "lpr/+/plate").start()
        tls = {"enabled": True, "ca_file": files.ca, "cert_file": files.client_cert}
        tls["key_file"] = files.client_key
        sink = await open_mqtt_sink(mqtt_settings(tmp_path, broker, tls=tls))
        # Without the test CA the broker's certificate is not trusted: refused, said why.
        untrusted = await open_mqtt_sink(
            mqtt_settings(
                tmp_path / "other", broker, tls={"enabled": True}, client_id="lpr-untrusted"
            )
        )
        try:
            event = make_event("gate")
            await sink.append(event)
            await subscriber.wait_for_async(lambda m: seen_ids(subscriber) == [event.event_id], 15)
            await eventually(lambda: untrusted.problem is not None, 15, "the untrusted refused")
            assert "certificate verify failed" in (untrusted.problem or "")
        finally:
            await sink.close()
            await untrusted.close()
            subscriber.stop()


async def test_mqtt_3_1_1_gives_the_same_messages(broker: Broker, tmp_path: Path) -> None:
    subscriber = Subscriber(broker, "lpr/#").start()
    sink = await open_mqtt_sink(mqtt_settings(tmp_path, broker, protocol="3.1.1"))
    event = make_event("exit")
    try:
        await sink.append(event)
        await subscriber.wait_for_async(lambda m: seen_ids(subscriber) == [event.event_id], 15)
        connection = sink.deliverers[0].connection  # type: ignore[attr-defined]
        assert connection.protocol == "3.1.1"
    finally:
        await sink.close()
        subscriber.stop()
    assert plates(subscriber)[0].json() == event.to_dict(include_crop=False)
    assert json.loads(retained(broker, "lpr/exit/last")["lpr/exit/last"])["text"] == event.text


async def test_an_erasure_clears_the_retained_last_that_holds_the_plate(
    broker: Broker, tmp_path: Path
) -> None:
    # Bounded: a hang (seen once in CI, not reproduced) fails here within a minute, with the
    # await it hung in, instead of at pytest's 10-minute timeout.
    async with asyncio.timeout(60):
        await _erasure_then_restart(broker, tmp_path)


async def _erasure_then_restart(broker: Broker, tmp_path: Path) -> None:
    settings = mqtt_settings(tmp_path, broker)
    sink = await open_mqtt_sink(settings)
    gate, yard = make_event("gate"), make_event("yard")
    try:
        await sink.append(gate)
        await sink.append(yard)
        await eventually(lambda: len(retained(broker, "lpr/+/last")) == 2, 10, "two lasts")
        assert await sink.forget(plate=gate.text) == 1
        assert set(retained(broker, "lpr/+/last")) == {"lpr/yard/last"}
    finally:
        await sink.close()
    # After a restart the service knows the broker's lasts again, from their retained copies.
    restarted = await open_mqtt_sink(settings)
    try:
        await eventually(lambda: restarted.deliverers[0].ready, 10, "connected")
        for _ in range(50):  # the retained copies arrive right after the subscription
            if await restarted.forget(event_id=yard.event_id) == 1:
                break
            await asyncio.sleep(0.1)
        assert retained(broker, "lpr/+/last") == {}
    finally:
        await restarted.close()


def _alert_now(camera: str) -> PlateEvent:
    """An alert of a plate seen just now."""
    now = Sighting(datetime.now(UTC).isoformat(timespec="milliseconds"), 0.0)
    return dataclasses.replace(
        make_event(camera),
        alert=True,
        match={"label": "staff", "plate": "A9", "distance": 0},
        first_seen=now,
        last_seen=now,
    )


async def test_an_alert_held_through_an_outage_is_published_as_not_live(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An alert delivered at once is live; one that waited for the broker longer than
    ``mqtt.alert_max_age_s`` arrives all the same, marked not live (and so does not turn the
    Home Assistant alert sensor on)."""
    with Broker(tmp_path / "broker", persistence=True) as broker:
        broker.start()
        subscriber = Subscriber(broker, "lpr/+/alert", persistent=True).start()
        settings = mqtt_settings(tmp_path, broker, alert_max_age_s=2.0)
        sink = await open_mqtt_sink(settings)
        fresh, held = _alert_now("gate"), _alert_now("yard")
        try:
            await eventually(lambda: sink.deliverers[0].ready, 10, "connected")
            await sink.append(fresh)
            await subscriber.wait_for_async(lambda m: len(subscriber.messages) == 1, 15)
            broker.stop()
            await eventually(lambda: sink.problem is not None, 10, "the outage noticed")
            await sink.append(held)
            await asyncio.sleep(3.0)  # longer than alert_max_age_s
            with caplog.at_level(logging.INFO, logger="streamer.delivery.mqtt_delivery"):
                broker.start()
                await subscriber.wait_for_async(lambda m: len(subscriber.messages) == 2, 30)
        finally:
            await sink.close()
            subscriber.stop()
    alerts = {m.json()["event_id"]: m.json() for m in subscriber.messages}
    assert alerts[fresh.event_id]["live"] is True
    assert alerts[held.event_id]["live"] is False and alerts[held.event_id]["alert"] is True
    assert any(
        held.event_id in r.getMessage() and "not live" in r.getMessage() for r in caplog.records
    )
