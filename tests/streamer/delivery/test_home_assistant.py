"""Home Assistant discovery: the configs follow its documented MQTT discovery schema, are
retained on a real broker, and go away with their camera (a reload, or a camera removed while
the service was stopped)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from streamer.config import MqttConfig
from streamer.delivery import home_assistant as ha
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
DEVICE_KEYS = {
    "configuration_url", "connections", "hw_version", "identifiers", "manufacturer", "model",
    "model_id", "name", "serial_number", "suggested_area", "sw_version", "via_device",
}  # fmt: skip
ORIGIN_KEYS = {"name", "sw_version", "support_url"}
TOPIC = re.compile(r"^[^#+\x00]+$")


def check_discovery_config(topic: str, config: dict[str, Any], prefix: str) -> None:
    """The documented rules: the topic's shape, the allowed keys, the required ones."""
    match = re.fullmatch(
        rf"{re.escape(prefix)}/(sensor|binary_sensor)/([\w-]+)/([\w-]+)/config", topic
    )
    assert match, topic
    component = match.group(1)
    allowed = SENSOR_KEYS if component == "sensor" else BINARY_SENSOR_KEYS
    assert set(config) <= allowed, set(config) - allowed
    assert TOPIC.match(config["state_topic"])  # required, and no wildcard
    assert not ({"availability", "availability_topic"} <= set(config))  # one or the other
    assert isinstance(config["unique_id"], str) and config["unique_id"]  # the device needs it
    device = config["device"]
    assert set(device) <= DEVICE_KEYS and (device.get("identifiers") or device.get("connections"))
    assert set(config["origin"]) <= ORIGIN_KEYS and config["origin"]["name"]
    assert config["qos"] in (0, 1, 2)
    if component == "binary_sensor":
        assert isinstance(config["off_delay"], int) and config["off_delay"] > 0
        assert {config["payload_on"], config["payload_off"]} == {"ON", "OFF"}
    for key in ("availability_topic", "json_attributes_topic"):
        assert TOPIC.match(config[key]), key


def test_configs_follow_the_documented_schema() -> None:
    config = MqttConfig(host="broker", topic_prefix="site/lpr", discovery={"node_id": "lpr"})
    configs = ha.discovery_configs(config, "gate_2")
    assert set(configs) == {
        "homeassistant/sensor/lpr/gate_2_last_plate/config",
        "homeassistant/binary_sensor/lpr/gate_2_alert/config",
    }
    for topic, payload in configs.items():
        check_discovery_config(topic, payload, "homeassistant")
        assert payload["availability_topic"] == "site/lpr/status"
        assert ha.camera_of(config, topic) == "gate_2"
    sensor = configs["homeassistant/sensor/lpr/gate_2_last_plate/config"]
    assert sensor["state_topic"] == sensor["json_attributes_topic"] == "site/lpr/gate_2/last"
    without_alerts = config.model_copy(update={"alerts": False})
    assert list(ha.discovery_configs(without_alerts, "gate")) == [
        "homeassistant/sensor/lpr/gate_last_plate/config"
    ]


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
    config = sink.deliverers[0].config
    return {topic for camera in cameras for topic in ha.config_topics(config, camera)}


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
