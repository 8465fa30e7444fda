"""Home Assistant discovery: the configs follow its documented MQTT discovery schema, are
retained on a real broker, and go away with their camera (a reload, or a camera removed while
the service was stopped)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import jinja2.sandbox
import pytest

from streamer.config import MqttConfig
from streamer.delivery import home_assistant as ha
from streamer.delivery.consumer_config import deliverers_of
from streamer.delivery.consumers import Consumers
from streamer.delivery.mqtt_health import HealthPublisher
from streamer.domain.cameras import CameraStatus
from streamer.foundation.metrics import Metrics
from streamer.foundation.shards import Shard, owner
from streamer.store.installation import installation_id
from tests.mqtt_broker import Broker, publish, retained
from tests.streamer.delivery.test_mqtt_delivery import mqtt_settings, open_mqtt_sink
from tests.streamer.delivery.webhook_setup import FAST, open_consumers
from tests.webhook_receiver import eventually, make_event

# Home Assistant's documented keys (https://www.home-assistant.io/integrations/sensor.mqtt/,
# .../binary_sensor.mqtt/, .../mqtt/#mqtt-discovery): what a config may hold.
ENTITY_KEYS = {
    "availability", "availability_mode", "availability_template", "availability_topic",
    "default_entity_id", "device", "device_class", "enabled_by_default", "encoding",
    "entity_category", "entity_picture", "expire_after", "force_update", "icon",
    "json_attributes_template", "json_attributes_topic", "name", "object_id", "origin",
    "payload_available", "payload_not_available", "platform", "qos", "state_topic",
    "unique_id", "value_template",
}  # fmt: skip
SENSOR_KEYS = ENTITY_KEYS | {
    "last_reset_value_template", "options", "state_class", "suggested_display_precision",
    "unit_of_measurement",
}  # fmt: skip
BINARY_SENSOR_KEYS = ENTITY_KEYS | {"off_delay", "payload_off", "payload_on"}
# .../event.mqtt/ and .../image.mqtt/ (no state of their own: no expire_after, force_update).
EVENT_KEYS = ENTITY_KEYS - {"expire_after", "force_update"} | {"event_types"}
IMAGE_KEYS = (ENTITY_KEYS - {"expire_after", "force_update", "state_topic", "value_template"}) | {
    "content_type", "image_encoding", "image_topic", "url_template", "url_topic",
}  # fmt: skip
KEYS = {
    "sensor": SENSOR_KEYS,
    "binary_sensor": BINARY_SENSOR_KEYS,
    "event": EVENT_KEYS,
    "image": IMAGE_KEYS,
}
DEVICE_KEYS = {
    "configuration_url", "connections", "hw_version", "identifiers", "manufacturer", "model",
    "model_id", "name", "serial_number", "suggested_area", "sw_version", "via_device",
}  # fmt: skip
ORIGIN_KEYS = {"name", "sw_version", "support_url"}
TOPIC = re.compile(r"^[^#+\x00]+$")


def check_discovery_config(topic: str, config: dict[str, Any], prefix: str) -> None:
    """The documented rules: the topic's shape, the allowed keys, the required ones."""
    match = re.fullmatch(
        rf"{re.escape(prefix)}/(sensor|binary_sensor|event|image)/([\w-]+)/([\w-]+)/config", topic
    )
    assert match, topic
    component = match.group(1)
    allowed = KEYS[component]
    assert set(config) <= allowed, set(config) - allowed
    # required, and no wildcard: an image's picture topic, every other's state topic
    assert TOPIC.match(config["image_topic" if component == "image" else "state_topic"])
    assert not ({"availability", "availability_topic"} <= set(config))  # one or the other
    assert isinstance(config["unique_id"], str) and config["unique_id"]  # the device needs it
    device = config["device"]
    assert set(device) <= DEVICE_KEYS and (device.get("identifiers") or device.get("connections"))
    assert set(config["origin"]) <= ORIGIN_KEYS and config["origin"]["name"]
    assert config["qos"] in (0, 1, 2)
    if component == "event":
        assert config["event_types"] and all(isinstance(t, str) for t in config["event_types"])
    if component == "sensor" and config.get("device_class") == "enum":
        assert config["options"] and "unit_of_measurement" not in config
    if component == "binary_sensor":
        assert isinstance(config["off_delay"], int) and config["off_delay"] > 0
        assert {config["payload_on"], config["payload_off"]} == {"ON", "OFF"}
    for key in ("availability_topic", "json_attributes_topic"):
        if key in config:
            assert TOPIC.match(config[key]), key


def test_configs_follow_the_documented_schema() -> None:
    config = MqttConfig(host="broker", topic_prefix="site/lpr", discovery={"node_id": "lpr"})
    configs = ha.discovery_configs(config, "gate_2", area="Driveway", health=True)
    assert set(configs) == {
        "homeassistant/sensor/lpr/gate_2_last_plate/config",
        "homeassistant/event/lpr/gate_2_pass/config",
        "homeassistant/image/lpr/gate_2_plate_image/config",
        "homeassistant/binary_sensor/lpr/gate_2_alert/config",
        "homeassistant/sensor/lpr/gate_2_health/config",
    }
    devices = {json.dumps(c["device"], sort_keys=True) for c in configs.values()}
    assert len(devices) == 1  # one device per camera, in its area, under the service's
    device = configs["homeassistant/event/lpr/gate_2_pass/config"]["device"]
    assert device["identifiers"] == ["lpr_gate_2"] and device["name"] == "gate_2"
    assert device["suggested_area"] == "Driveway" and device["via_device"] == "lpr"
    image = configs["homeassistant/image/lpr/gate_2_plate_image/config"]
    assert image["image_topic"] == "site/lpr/gate_2/plate_image"
    assert image["content_type"] == "image/jpeg"
    health = configs["homeassistant/sensor/lpr/gate_2_health/config"]
    assert health["state_topic"] == "site/lpr/gate_2/health"
    assert set(health["options"]) == {"starting", "connected", "reconnecting", "ended", "stopped"}
    for topic, payload in configs.items():
        check_discovery_config(topic, payload, "homeassistant")
        assert payload["availability_topic"] == "site/lpr/status"
        assert ha.camera_of(config, topic) == "gate_2"
    sensor = configs["homeassistant/sensor/lpr/gate_2_last_plate/config"]
    assert sensor["state_topic"] == sensor["json_attributes_topic"] == "site/lpr/gate_2/last"
    without_alerts = config.model_copy(update={"alerts": False})
    assert list(ha.discovery_configs(without_alerts, "gate")) == [
        "homeassistant/sensor/lpr/gate_last_plate/config",
        "homeassistant/event/lpr/gate_pass/config",
        "homeassistant/image/lpr/gate_plate_image/config",
    ]
    assert "suggested_area" not in ha.camera_device(config, "gate")


@pytest.mark.parametrize(("version", "event_type"), [(1, "pass"), (2, "correction")])
def test_the_event_entity_gets_the_pass_as_home_assistant_renders_it(
    version: int, event_type: str
) -> None:
    """The value template, rendered by Jinja as Home Assistant does (``value_json``: the
    message's JSON), gives the JSON object an MQTT event takes: ``event_type`` and the
    attributes."""
    config = MqttConfig(host="broker", discovery={"node_id": "lpr"})
    template = ha.discovery_configs(config, "gate")["homeassistant/event/lpr/gate_pass/config"]
    payload = make_event("gate").to_dict(include_crop=False) | {"version": version}
    payload["match"] = {"label": "staff", "plate": payload["text"], "distance": 0}
    payload["alert"] = True
    environment = jinja2.sandbox.SandboxedEnvironment()
    rendered = environment.from_string(template["value_template"]).render(value_json=payload)
    assert json.loads(rendered) == {
        "event_type": event_type,
        "plate": payload["text"],
        "label": "staff",
        "alert": True,
        "event_id": payload["event_id"],
    }
    assert event_type in template["event_types"]
    del payload["match"]
    unknown = json.loads(
        environment.from_string(template["value_template"]).render(
            value_json=payload | {"match": None}
        )
    )
    assert unknown["label"] is None


@pytest.mark.parametrize(
    "topic",
    [
        "homeassistant/sensor/other/gate_last_plate/config",  # another service's
        "homeassistant/sensor/lpr/gate_alert/config",  # an alert is a binary_sensor
        "homeassistant/sensor/lpr/_last_plate/config",
        "homeassistant/light/lpr/gate_last_plate/config",
        "elsewhere/sensor/lpr/gate_last_plate/config",
        "homeassistant/sensor/lpr/gate_last_plate/state",
    ],
)
def test_topics_of_others_are_not_ours(topic: str) -> None:
    assert ha.camera_of(MqttConfig(host="broker", discovery={"node_id": "lpr"}), topic) is None


async def test_retained_configs_appear_and_go_with_their_camera(tmp_path: Path) -> None:
    with Broker(tmp_path / "broker") as broker:
        broker.start()
        # A camera removed while the service was stopped left its config behind.
        stale = "homeassistant/sensor/lpr/old_last_plate/config"
        publish(broker, stale, json.dumps({"state_topic": "lpr/old/last"}), retain=True)
        other = "homeassistant/sensor/other/old_last_plate/config"  # another service's
        publish(broker, other, "{}", retain=True)
        sink = await open_mqtt_sink(mqtt_settings(tmp_path, broker), Metrics())
        try:
            ours = topics_of(sink, "gate", "yard", "exit")
            await eventually(
                lambda: set(retained(broker, "homeassistant/#")) == ours | {other}, 10, "announced"
            )
            held = retained(broker, "homeassistant/#")
            for topic in ours:
                check_discovery_config(topic, json.loads(held[topic]), "homeassistant")
            assert retained(broker, "lpr/status")["lpr/status"] == b"online"

            await sink.append(make_event("yard"))
            await eventually(lambda: "lpr/yard/last" in retained(broker, "lpr/#"), 10, "last")

            await sink.cameras_changed(["gate", "exit", "lane"])  # a reload: -yard +lane
            assert "lpr/yard/last" not in retained(broker, "lpr/#")
            want = topics_of(sink, "gate", "exit", "lane")
            assert set(retained(broker, "homeassistant/#")) == want | {other}
        finally:
            await sink.close()


def topics_of(sink: Any, *cameras: str) -> set[str]:
    """The config topics the sink's MQTT deliverer announces for ``cameras``."""
    deliverer = sink.deliverers[0]
    health = deliverer.health is not None
    return {
        topic
        for camera in cameras
        for topic in ha.discovery_configs(deliverer.config, camera, health=health)
    }


async def test_replicas_announce_their_own_cameras_each_with_its_own_status(
    tmp_path: Path,
) -> None:
    with Broker(tmp_path / "broker") as broker:
        broker.start()
        sinks = []
        try:
            for index in range(2):
                settings = mqtt_settings(tmp_path / f"r{index}", broker, client_id=f"lpr-{index}")
                sink = await open_consumers(settings, Metrics(), shard=Shard(index, 2), **FAST)
                assert sink is not None
                sinks.append(sink)
            everything = topics_of(sinks[0], "gate", "yard", "exit")
            await eventually(
                lambda: set(retained(broker, "homeassistant/#")) == everything, 10, "announced"
            )
            held = retained(broker, "#")
            assert held["lpr/status/0"] == held["lpr/status/1"] == b"online"
            assert "lpr/status" not in held
            for topic in everything:
                config = json.loads(held[topic])
                camera = ha.camera_of(sink_config(sinks[0]), topic)
                assert camera is not None
                assert config["availability_topic"] == f"lpr/status/{owner(camera, 2)}"
            await sinks[0].close()  # one replica stops: only its cameras go unavailable
            assert retained(broker, "lpr/status/+") == {
                "lpr/status/0": b"offline",
                "lpr/status/1": b"online",
            }
            assert set(retained(broker, "homeassistant/#")) == everything  # none cleared
        finally:
            for sink in sinks:
                await sink.close()


def sink_config(sink: Any) -> MqttConfig:
    return sink.deliverers[0].config


async def test_two_installations_on_one_broker_keep_to_their_own_topics(tmp_path: Path) -> None:
    """Both with the default topic prefix and node id, and cameras of the same names: each
    has its own topics, so neither clears nor replaces the other's retained messages."""
    with Broker(tmp_path / "broker") as broker:
        broker.start()
        sinks, ids, events = [], [], []
        try:
            for site in ("north", "south"):
                ids.append(await installation_id(None, tmp_path / site))
                settings = mqtt_settings(
                    tmp_path / site,
                    broker,
                    client_id=f"lpr-{site}",
                    topic_prefix=MqttConfig.model_fields["topic_prefix"].default,
                    discovery={},
                )
                sink = await open_consumers(settings, Metrics(), installation=ids[-1], **FAST)
                sinks.append(sink)
                events.append(make_event("yard"))
                await sink.append(events[-1])
            assert ids[0] != ids[1]
            assert ids[0] == await installation_id(None, tmp_path / "north")  # kept
            lasts = {f"lpr/{i}/yard/last" for i in ids}
            await eventually(lambda: lasts <= set(retained(broker, "lpr/#")), 10, "both lasts")
            await sinks[1].cameras_changed(["gate"])  # the south site's yard goes
            held = retained(broker, "#")
            assert json.loads(held[f"lpr/{ids[0]}/yard/last"])["event_id"] == events[0].event_id
            assert f"lpr/{ids[1]}/yard/last" not in held
            north = topics_of(sinks[0], "gate", "yard", "exit")
            assert all(f"/lpr-{ids[0]}/" in topic for topic in north)
            assert north <= set(held)  # the south site cleared none of the north's configs
            await sinks[1].close()
            held = retained(broker, "#")
            assert held[f"lpr/{ids[1]}/status"] == b"offline"
            assert held[f"lpr/{ids[0]}/status"] == b"online"
        finally:
            for sink in sinks:
                await sink.close()


def _status(camera: str, state: str, answered: float) -> CameraStatus:
    return CameraStatus(
        name=camera,
        state=state,
        health=f"{state}: {answered:g} of 5 frames/s answered",
        url="rtsp://***:***@cam/x",
        decode_fps=15.0,
        sample_fps=5.0,
        answered_fps=answered,
        last_error=None,
        frames_decoded=10,
        frames_sent=5,
        frames_answered=5,
        frames_dropped=0,
        width=1920,
        height=1080,
    )


async def test_the_plate_image_and_the_health_are_retained_and_cleared(tmp_path: Path) -> None:
    """On a real broker: a pass's crop beside its ``last`` (the image entity), each camera's
    health from its state (the health sensor), both cleared with what they belong to."""
    states = {"gate": "connected", "yard": "reconnecting", "exit": "connected"}
    with Broker(tmp_path / "broker") as broker:
        broker.start()
        settings = mqtt_settings(tmp_path, broker)
        gate = settings.cameras[0].model_copy(update={"area": "Front gate"})
        settings = settings.model_copy(update={"cameras": [gate, *settings.cameras[1:]]})

        def camera_status() -> list[CameraStatus]:
            return [_status(c, state, 4.0) for c, state in states.items()]

        deliverers = deliverers_of(
            settings, Metrics(), installation="0a1b2c3d", camera_status=camera_status
        )
        deliverers = [d for d in deliverers if d.name == "mqtt"]
        (deliverer,) = deliverers
        deliverer.health.interval_s = 0.2
        sink = await Consumers.open(settings.outbox, deliverers, Metrics(), **FAST)
        try:
            event = make_event("gate")
            await sink.append(event)
            await eventually(
                lambda: "lpr/gate/plate_image" in retained(broker, "lpr/#"), 10, "the crop"
            )
            held = retained(broker, "#")
            assert held["lpr/gate/plate_image"] == event.crop_jpeg  # the JPEG, as it is
            config = json.loads(held["homeassistant/sensor/lpr/gate_health/config"])
            check_discovery_config(
                "homeassistant/sensor/lpr/gate_health/config", config, "homeassistant"
            )
            assert config["device"]["suggested_area"] == "Front gate"
            await eventually(
                lambda: len(retained(broker, "lpr/+/health")) == 3, 10, "every camera's health"
            )
            health = json.loads(retained(broker, "lpr/yard/health")["lpr/yard/health"])
            assert health["state"] == "reconnecting" and health["state"] in config["options"]
            assert "url" not in health  # nothing of the camera's address
            states["yard"] = "connected"  # it reconnects: the retained health follows
            await eventually(
                lambda: (
                    json.loads(retained(broker, "lpr/yard/health")["lpr/yard/health"])["state"]
                    == "connected"
                ),
                10,
                "the new state",
            )
            # An erasure of the plate clears the pass and its picture.
            assert await sink.forget(plate=event.text) == 1
            held = retained(broker, "lpr/#")
            assert "lpr/gate/last" not in held and "lpr/gate/plate_image" not in held
            # A camera removed: its health goes with its entities.
            await sink.cameras_changed(["gate", "exit"])
            assert "lpr/yard/health" not in retained(broker, "lpr/#")
        finally:
            await sink.close()


def test_health_goes_out_at_once_on_a_state_change_and_rates_only_now_and_then() -> None:
    """Rates change with every look; publishing each would be a retained message per camera
    every few seconds. A new state or error goes at once, new rates after refresh_s."""
    config = MqttConfig(host="broker", discovery={"node_id": "lpr"})
    health = HealthPublisher(config, lambda: [], lambda: ["gate"], refresh_s=60.0)
    first = ha.health_payload(_status("gate", "connected", 4.0))
    assert health._due("gate", first)  # never published
    health._published["gate"] = (first, time.monotonic())
    assert not health._due("gate", first)
    assert not health._due("gate", ha.health_payload(_status("gate", "connected", 3.0)))
    assert health._due("gate", ha.health_payload(_status("gate", "reconnecting", 0.0)))
    health._published["gate"] = (first, time.monotonic() - 61.0)  # a minute ago
    assert health._due("gate", ha.health_payload(_status("gate", "connected", 3.0)))
    assert not health._due("gate", first)  # nothing new to say
