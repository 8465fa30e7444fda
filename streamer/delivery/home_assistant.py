"""Home Assistant MQTT discovery: the retained config messages that make cameras appear.

Home Assistant subscribes to ``<prefix>/<component>/<node_id>/<object_id>/config`` and makes
an entity of each config it finds there (an empty retained message removes it). This
service announces one device (the service, ``identifiers: [<node_id>]``) and, per camera:

* a ``sensor`` "<camera> last plate": its state the text of ``<topic_prefix>/<camera>/last``
  (retained, the latest event of that camera), every field of the event as attributes;
* a ``binary_sensor`` "<camera> known-plate alert" (when ``mqtt.alerts``): on for
  ``alert_off_delay_s`` after a live event on ``<topic_prefix>/<camera>/alert`` (one
  published later than ``mqtt.alert_max_age_s`` after its plate was seen is not live).

Both are available while ``<topic_prefix>/status`` is ``online`` (the service's will sets it
``offline``); with several replicas, each camera's entities follow the status of the replica
that runs it, ``<topic_prefix>/status/<index>``. The keys are Home Assistant's documented
ones for MQTT sensors and binary sensors (https://www.home-assistant.io/integrations/sensor.mqtt/,
https://www.home-assistant.io/integrations/binary_sensor.mqtt/,
https://www.home-assistant.io/integrations/mqtt/#mqtt-discovery). Pure functions: the
publishing is streamer/delivery/mqtt_delivery.py's.
"""

from __future__ import annotations

from typing import Any

from streamer import __version__
from streamer.config import MqttConfig

#: The status topic's payloads (the will is the second).
ONLINE, OFFLINE = "online", "offline"
#: object id suffix -> the Home Assistant component of each entity a camera gets.
_ENTITIES = {"last_plate": "sensor", "alert": "binary_sensor"}


def status_topic(config: MqttConfig, replica: int | None = None) -> str:
    """``<topic_prefix>/status``; of one replica of several, ``<topic_prefix>/status/<index>``
    (its will must not mark the others' cameras unavailable)."""
    base = f"{config.topic_prefix}/status"
    return base if replica is None else f"{base}/{replica}"


def camera_topic(config: MqttConfig, camera: str, leaf: str) -> str:
    """``<topic_prefix>/<camera>/<leaf>`` (leaf: plate, last, alert)."""
    return f"{config.topic_prefix}/{camera}/{leaf}"


def last_camera_of(config: MqttConfig, topic: str) -> str | None:
    """The camera of a ``<topic_prefix>/<camera>/last`` topic (None: not such a topic)."""
    head, _, leaf = topic.rpartition("/")
    prefix, _, camera = head.rpartition("/")
    return camera if leaf == "last" and prefix == config.topic_prefix and camera else None


def config_topic(config: MqttConfig, camera: str, entity: str) -> str:
    discovery = config.discovery
    component = _ENTITIES[entity]
    return f"{discovery.prefix}/{component}/{discovery.node_id}/{camera}_{entity}/config"


def config_topics(config: MqttConfig, camera: str) -> list[str]:
    """Every discovery config topic ``camera`` may have (also those to clear)."""
    return [config_topic(config, camera, entity) for entity in _ENTITIES]


def config_filter(config: MqttConfig) -> str:
    """The subscription that finds this service's retained configs."""
    discovery = config.discovery
    return f"{discovery.prefix}/+/{discovery.node_id}/+/config"


def camera_of(config: MqttConfig, topic: str) -> str | None:
    """The camera a config topic of this service is for (None: not one of ours)."""
    discovery = config.discovery
    parts = topic.split("/")
    prefix_levels = discovery.prefix.count("/") + 1
    if len(parts) != prefix_levels + 4 or "/".join(parts[:prefix_levels]) != discovery.prefix:
        return None
    component, node_id, object_id, leaf = parts[prefix_levels:]
    if node_id != discovery.node_id or leaf != "config":
        return None
    for entity, kind in _ENTITIES.items():
        suffix = f"_{entity}"
        if component == kind and object_id.endswith(suffix) and len(object_id) > len(suffix):
            return object_id[: -len(suffix)]
    return None


def device(config: MqttConfig) -> dict[str, Any]:
    node_id = config.discovery.node_id
    return {
        "identifiers": [node_id],
        "name": f"Licence plates ({node_id})",
        "manufacturer": "lpr-streamer",
        "model": "licence-plate stream processor",
        "sw_version": __version__,
    }


def _common(config: MqttConfig, camera: str, entity: str, name: str, status: str) -> dict[str, Any]:
    node_id = config.discovery.node_id
    return {
        "name": f"{camera} {name}",
        "unique_id": f"{node_id}_{camera}_{entity}",
        "availability_topic": status,
        "payload_available": ONLINE,
        "payload_not_available": OFFLINE,
        "device": device(config),
        "origin": {"name": "lpr-streamer", "sw_version": __version__},
        "qos": 1,
    }


def discovery_configs(
    config: MqttConfig, camera: str, status: str | None = None
) -> dict[str, dict[str, Any]]:
    """Config topic -> its payload, for every entity of ``camera`` (available while
    ``status``, default :func:`status_topic`, says online)."""
    status = status or status_topic(config)
    last = camera_topic(config, camera, "last")
    configs = {
        config_topic(config, camera, "last_plate"): {
            **_common(config, camera, "last_plate", "last plate", status),
            "state_topic": last,
            "value_template": "{{ value_json.text }}",
            "json_attributes_topic": last,
            "icon": "mdi:car",
        }
    }
    if config.alerts:
        alert = camera_topic(config, camera, "alert")
        configs[config_topic(config, camera, "alert")] = {
            **_common(config, camera, "alert", "known-plate alert", status),
            "state_topic": alert,
            # A late alert (published after mqtt.alert_max_age_s) does not turn it on.
            "value_template": "{{ 'ON' if value_json.alert and value_json.live else 'OFF' }}",
            "payload_on": "ON",
            "payload_off": "OFF",
            "off_delay": config.discovery.alert_off_delay_s,
            "json_attributes_topic": alert,
            "icon": "mdi:car-emergency",
        }
    return configs
