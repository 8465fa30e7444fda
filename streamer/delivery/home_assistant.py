"""Home Assistant MQTT discovery: the retained config messages that make cameras appear.

Home Assistant subscribes to ``<prefix>/<component>/<node_id>/<object_id>/config`` and makes
an entity of each config it finds there (an empty retained message removes it). Each camera
is a device of its own (``identifiers: [<node_id>_<camera>]``, its ``area`` from the config
as the suggested area, linked to the service's device by ``via_device``) with:

* a ``sensor`` "last plate": its state the text of ``<topic_prefix>/<camera>/last``
  (retained, the latest event of that camera), every field of the event as attributes;
* an ``event`` "pass": fired for each message on ``<topic_prefix>/<camera>/plate``
  (``event_type`` ``pass``, or ``correction`` for a later version), with the plate, its
  known-plate label and alert, and the event id: an automation triggers on every pass, the
  same car coming back included (a sensor's state would not change);
* an ``image`` "plate": the crop of the latest event, the JPEG on
  ``<topic_prefix>/<camera>/plate_image`` (retained, beside ``last``);
* a ``binary_sensor`` "known-plate alert" (when ``mqtt.alerts``): on for
  ``alert_off_delay_s`` after a live event on ``<topic_prefix>/<camera>/alert`` (one
  published later than ``mqtt.alert_max_age_s`` after its plate was seen is not live);
* a ``sensor`` "health" (diagnostic; when the service tells the camera's state): the state
  of ``<topic_prefix>/<camera>/health`` (retained: ``connected``, ``reconnecting``, ...),
  the health in words and the rates as attributes.

All are available while ``<topic_prefix>/status`` is ``online`` (the service's will sets it
``offline``); with several replicas, each camera's entities follow the status of the replica
that runs it, ``<topic_prefix>/status/<index>``. The keys are Home Assistant's documented
ones for MQTT sensors, binary sensors, events and images
(https://www.home-assistant.io/integrations/sensor.mqtt/, .../binary_sensor.mqtt/,
.../event.mqtt/, .../image.mqtt/, https://www.home-assistant.io/integrations/mqtt/#mqtt-discovery).
Pure functions: the publishing is streamer/delivery/mqtt_delivery.py's.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, get_args

from streamer import __version__
from streamer.config import MqttConfig
from streamer.domain.cameras import CameraStatus
from streamer.ingest.state import CameraState

#: The status topic's payloads (the will is the second).
ONLINE, OFFLINE = "online", "offline"
#: object id suffix -> the Home Assistant component of each entity a camera gets.
_ENTITIES = {
    "last_plate": "sensor",
    "pass": "event",
    "plate_image": "image",
    "alert": "binary_sensor",
    "health": "sensor",
}
#: A camera's states (``CameraStatus.state``), the health sensor's options.
CAMERA_STATES: tuple[str, ...] = get_args(CameraState)
#: The event entity's event types: a pass reported, and a later version of it.
EVENT_TYPES = ("pass", "correction")
#: The event entity's payload, made from the event's JSON by Home Assistant.
_EVENT_TEMPLATE = (
    "{{ {'event_type': 'correction' if (value_json.version | int(1)) > 1 else 'pass', "
    "'plate': value_json.text, "
    "'label': value_json.match.label if value_json.match else none, "
    "'alert': value_json.alert | default(false), "
    "'event_id': value_json.event_id} | tojson }}"
)


def message_json(payload: dict[str, Any]) -> str:
    """The JSON an MQTT message carries (as compact as the webhook body)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def seen_ago_s(payload: dict[str, Any], now: float) -> float | None:
    """Seconds from when an event's plate was last seen to ``now``; None when it does not
    say (an alert is live while this is within ``mqtt.alert_max_age_s``)."""
    try:
        return now - datetime.fromisoformat(str(payload["last_seen"]["utc"])).timestamp()
    except (KeyError, TypeError, ValueError):
        return None


def status_topic(config: MqttConfig, replica: int | None = None) -> str:
    """``<topic_prefix>/status``; of one replica of several, ``<topic_prefix>/status/<index>``
    (its will must not mark the others' cameras unavailable)."""
    base = f"{config.topic_prefix}/status"
    return base if replica is None else f"{base}/{replica}"


def camera_topic(config: MqttConfig, camera: str, leaf: str) -> str:
    """``<topic_prefix>/<camera>/<leaf>`` (leaf: plate, last, plate_image, alert, health)."""
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
    """The service's device: its cameras' devices are linked to it."""
    node_id = config.discovery.node_id
    return {
        "identifiers": [node_id],
        "name": f"Licence plates ({node_id})",
        "manufacturer": "lpr-streamer",
        "model": "licence-plate stream processor",
        "sw_version": __version__,
    }


def camera_device(config: MqttConfig, camera: str, area: str | None = None) -> dict[str, Any]:
    """A camera's device, in the area the config gives it."""
    node_id = config.discovery.node_id
    found = {
        "identifiers": [f"{node_id}_{camera}"],
        "name": camera,
        "manufacturer": "lpr-streamer",
        "model": "licence-plate camera",
        "sw_version": __version__,
        "via_device": node_id,
    }
    return found | {"suggested_area": area} if area else found


def _common(
    config: MqttConfig, camera: str, entity: str, name: str, status: str, area: str | None
) -> dict[str, Any]:
    node_id = config.discovery.node_id
    return {
        "name": name,  # Home Assistant puts the camera's (device's) name before it
        "unique_id": f"{node_id}_{camera}_{entity}",
        "availability_topic": status,
        "payload_available": ONLINE,
        "payload_not_available": OFFLINE,
        "device": camera_device(config, camera, area),
        "origin": {"name": "lpr-streamer", "sw_version": __version__},
        "qos": 1,
    }


def discovery_configs(
    config: MqttConfig,
    camera: str,
    status: str | None = None,
    *,
    area: str | None = None,
    health: bool = False,
) -> dict[str, dict[str, Any]]:
    """Config topic -> its payload, for every entity of ``camera`` (available while
    ``status``, default :func:`status_topic`, says online); ``health``: the service
    publishes the camera's health (its sensor is announced)."""
    status = status or status_topic(config)
    last = camera_topic(config, camera, "last")

    def common(entity: str, name: str) -> dict[str, Any]:
        return _common(config, camera, entity, name, status, area)

    configs = {
        config_topic(config, camera, "last_plate"): {
            **common("last_plate", "last plate"),
            "state_topic": last,
            "value_template": "{{ value_json.text }}",
            "json_attributes_topic": last,
            "icon": "mdi:car",
        },
        config_topic(config, camera, "pass"): {
            **common("pass", "pass"),
            "state_topic": camera_topic(config, camera, "plate"),
            "event_types": list(EVENT_TYPES),
            "value_template": _EVENT_TEMPLATE,
            "icon": "mdi:car-arrow-right",
        },
        config_topic(config, camera, "plate_image"): {
            **common("plate_image", "plate"),
            "image_topic": camera_topic(config, camera, "plate_image"),
            "content_type": "image/jpeg",
        },
    }
    if config.alerts:
        alert = camera_topic(config, camera, "alert")
        configs[config_topic(config, camera, "alert")] = {
            **common("alert", "known-plate alert"),
            "state_topic": alert,
            # A late alert (published after mqtt.alert_max_age_s) does not turn it on.
            "value_template": "{{ 'ON' if value_json.alert and value_json.live else 'OFF' }}",
            "payload_on": "ON",
            "payload_off": "OFF",
            "off_delay": config.discovery.alert_off_delay_s,
            "json_attributes_topic": alert,
            "icon": "mdi:car-emergency",
        }
    if health:
        topic = camera_topic(config, camera, "health")
        configs[config_topic(config, camera, "health")] = {
            **common("health", "health"),
            "state_topic": topic,
            "value_template": "{{ value_json.state }}",
            "json_attributes_topic": topic,
            "device_class": "enum",
            "options": list(CAMERA_STATES),
            "entity_category": "diagnostic",
            "icon": "mdi:cctv",
        }
    return configs


def health_payload(status: CameraStatus) -> dict[str, Any]:
    """What ``<topic_prefix>/<camera>/health`` holds: the state, the health in words, the
    rates (no URL: it may carry credentials, even redacted it says nothing here)."""
    return {
        "state": status.state,
        "health": status.health,
        "answered_fps": round(status.answered_fps, 2),
        "sample_fps": status.sample_fps,
        "decode_fps": round(status.decode_fps, 2),
        "frames_dropped": status.frames_dropped,
        "last_error": status.last_error,
    }
