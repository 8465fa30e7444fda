"""The service on the sample clip (the real CPU Triton) publishing to a real Mosquitto broker
next to a real webhook receiver: the same events on both, Home Assistant discovery that
follows a reload, and ``offline`` when it stops, all under the default topics of the
installation's id."""

from __future__ import annotations

import json
import time
from pathlib import Path

from streamer.inference.embedded.server import EmbeddedTriton
from tests.mqtt_broker import Broker, Subscriber, retained
from tests.streamer.delivery.test_home_assistant import check_discovery_config
from tests.streamer.web.running_service import clip_service_config, running_service
from tests.webhook_receiver import new_secret

LINK_FIELDS = ("crop_url", "frame_url")  # signed per message: their expiry differs


def test_clip_events_reach_mqtt_as_the_webhook_gets_them(
    triton_server: EmbeddedTriton, tmp_path: Path
) -> None:
    secret = new_secret()
    with Broker(tmp_path / "broker") as broker:
        broker.start()
        subscriber = Subscriber(broker, "lpr/#").start()
        mqtt = (
            f"mqtt: {{host: 127.0.0.1, port: {broker.port}, client_id: lpr-app-test,\n"
            "       public_base_url: 'https://lpr.example.com'}\n"
        )
        config = clip_service_config(triton_server.grpc_url, secret) + mqtt
        path = tmp_path / "site.yaml"
        with running_service(path, config, secret) as running:
            receiver = running.receiver
            installation = running.service.installation
            assert installation is not None
            assert (tmp_path / "data" / "installation-id").read_text().strip() == installation
            base = f"lpr/{installation}"
            deadline = time.monotonic() + 120
            while len(receiver.delivered()) < 2 or len(subscriber.on(f"{base}/yard/plate")) < 2:
                assert time.monotonic() < deadline, "no two events on both"
                time.sleep(0.1)
            hooks = {r.payload["event_id"]: r.payload for r in receiver.delivered()[:2]}
            messages = {m.json()["event_id"]: m.json() for m in subscriber.on(f"{base}/yard/plate")}
            assert set(messages) >= set(hooks)
            for event_id, hook in hooks.items():
                message = messages[event_id]
                for field in LINK_FIELDS:  # both signed links to the same pictures
                    assert message[field].split("?")[0] == hook[field].split("?")[0]
                    assert "sig=" in message[field]
                strip = {k: v for k, v in message.items() if k not in LINK_FIELDS}
                assert strip == {k: v for k, v in hook.items() if k not in LINK_FIELDS}
            texts = sorted(p["text"] for p in hooks.values())
            assert texts == ["O567AM76", "Y836XH76"]
            # The alert is published after the event's plate message: wait for it too.
            while not subscriber.on(f"{base}/yard/alert"):
                assert time.monotonic() < deadline, "no alert"
                time.sleep(0.1)
            alerts = [m.json()["text"] for m in subscriber.on(f"{base}/yard/alert")]
            assert set(alerts) == {"O567AM76"}  # the staff list is an alert list

            held = retained(broker, "#")
            assert held[f"{base}/status"] == b"online"
            assert json.loads(held[f"{base}/yard/last"])["event_id"] in hooks
            yard = {t for t in held if t.startswith("homeassistant/") and "/yard_" in t}
            # last plate, pass, plate image, alert and health, each camera a device of its own
            assert len(yard) == 5 and all(f"/lpr-{installation}/" in t for t in yard)
            assert held[f"{base}/yard/plate_image"][:2] == b"\xff\xd8"  # a JPEG
            health = f"{base}/yard/health"  # retained at connect, then as the state changes
            while json.loads(retained(broker, health)[health])["state"] == "starting":
                assert time.monotonic() < deadline + 15, "the camera's health stayed 'starting'"
                time.sleep(0.5)
            for topic in yard:
                check_discovery_config(topic, json.loads(held[topic]), "homeassistant")

            # A reload that replaces the camera: its entities go, the new one's come.
            path.write_text(path.read_text().replace("name: yard", "name: gate"))
            outcome = running.call(running.service.reload("test"))
            assert outcome["outcome"] == "applied", outcome
            held = retained(broker, "#")
            assert not [t for t in held if "yard" in t]  # configs and last cleared
            assert len([t for t in held if t.startswith("homeassistant/") and "/gate_" in t]) == 5
            assert running.service.readiness()[1]["sinks"] == "ok"
        assert retained(broker, f"{base}/status")[f"{base}/status"] == b"offline"
        subscriber.stop()
