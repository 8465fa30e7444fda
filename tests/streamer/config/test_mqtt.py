"""The ``mqtt`` section: defaults, the password from the environment and never shown, paths
that resolve against the config's folder, and messages that name the key."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from streamer.config import ConfigError, load_config
from tests.streamer.config.config_files import CAMERA, assert_config_error, load_text, write

SECRET_PW = "mqtt-pw-s3cr3t"


def test_defaults_and_the_password_from_the_environment(tmp_path: Path) -> None:
    text = f"cameras:\n{CAMERA}mqtt:\n  host: broker.local\n  username: lpr\n"
    text += "  password: ${MQTT_PASSWORD}\n  tls: {enabled: true, ca_file: certs/ca.pem}\n"
    settings = load_text(tmp_path, text, env={"MQTT_PASSWORD": SECRET_PW})
    mqtt = settings.mqtt
    assert mqtt is not None and mqtt.password is not None
    assert mqtt.password.get_secret_value() == SECRET_PW
    assert (mqtt.broker_port, mqtt.broker, mqtt.protocol) == (8883, "broker.local:8883", "auto")
    assert mqtt.client_id == f"lpr-{socket.gethostname()}"[:64]
    assert (mqtt.topic_prefix, mqtt.discovery.prefix, mqtt.discovery.node_id) == (
        "lpr/{installation}",
        "homeassistant",
        "lpr-{installation}",
    )
    assert not mqtt.resolved
    resolved = mqtt.for_installation("0a1b2c3d")
    assert (resolved.topic_prefix, resolved.discovery.node_id) == ("lpr/0a1b2c3d", "lpr-0a1b2c3d")
    assert resolved.resolved and resolved.host == mqtt.host and not mqtt.resolved
    assert mqtt.tls.ca_file == tmp_path / "certs" / "ca.pem"  # the config file's folder
    assert settings.delivery_targets == ["mqtt"]
    for shown in (repr(settings), str(settings), json.dumps(settings.redacted())):
        assert SECRET_PW not in shown


def test_no_mqtt_section_means_no_mqtt(tmp_path: Path) -> None:
    settings = load_text(tmp_path, f"cameras:\n{CAMERA}")
    assert settings.mqtt is None and settings.delivery_targets == []
    off = load_text(tmp_path, f"cameras:\n{CAMERA}mqtt: {{host: b, enabled: false}}\n")
    assert off.delivery_targets == [] and off.configured_targets == ["history", "stdout", "mqtt"]
    assert off.consumers == ["history", "stdout"]  # the log's consumers in this process


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("{host: 'mqtt://broker'}", ["mqtt.host", "host name or IP only"]),
        ("{host: b, password: x}", ["mqtt", "password is set without username"]),
        ("{host: b, tls: {cert_file: c.pem}}", ["mqtt.tls", "cert_file and key_file go together"]),
        ("{host: b, topic_prefix: 'lpr/#'}", ["mqtt.topic_prefix", "is not a topic"]),
        ("{host: b, topic_prefix: '/lpr'}", ["mqtt.topic_prefix", "is not a topic"]),
        ("{host: b, discovery: {node_id: 'a b'}}", ["mqtt.discovery.node_id"]),
        ("{host: b, discovery: {node_id: 'x-{site}'}}", ["mqtt.discovery.node_id"]),
        ("{host: b, protocol: '4'}", ["mqtt.protocol"]),
        ("{host: b, port: 0}", ["mqtt.port"]),
        ("{host: b, retry_initial_delay_s: 5, retry_max_delay_s: 1}", ["retry_max_delay_s"]),
        ("{host: b, public_base_url: 'ftp://x'}", ["mqtt.public_base_url", "http"]),
        ("{host: b, qos: 2}", ["mqtt.qos"]),
    ],
)
def test_bad_mqtt_sections_name_the_key(tmp_path: Path, section: str, expected: list[str]) -> None:
    assert_config_error(tmp_path, f"cameras:\n{CAMERA}mqtt: {section}\n", expected)


def test_the_installation_id_can_go_anywhere_in_the_topics(tmp_path: Path) -> None:
    text = f"cameras:\n{CAMERA}mqtt: {{host: b, topic_prefix: 'site/{{installation}}/lpr',\n"
    text += "  discovery: {node_id: '{installation}_gate'}}\n"
    mqtt = load_text(tmp_path, text).mqtt
    assert mqtt is not None
    resolved = mqtt.for_installation("0a1b2c3d")
    assert (resolved.topic_prefix, resolved.discovery.node_id) == (
        "site/0a1b2c3d/lpr",
        "0a1b2c3d_gate",
    )
    fixed = load_text(tmp_path, f"cameras:\n{CAMERA}mqtt: {{host: b, topic_prefix: lpr}}\n").mqtt
    assert fixed is not None and fixed.for_installation("0a1b2c3d").topic_prefix == "lpr"


def test_a_webhook_target_may_not_take_the_brokers_name(tmp_path: Path) -> None:
    secret = "whsec_" + "A" * 32
    text = f"cameras:\n{CAMERA}webhooks: [{{name: mqtt, url: 'http://x/', secret: '{secret}'}}]\n"
    assert_config_error(tmp_path, text + "mqtt: {host: b}\n", ["mqtt", "rename that webhook"])
    assert load_text(tmp_path, text).delivery_targets == ["mqtt"]  # fine without mqtt:


def test_the_password_is_not_in_a_refusal(tmp_path: Path) -> None:
    path = write(tmp_path, f"cameras:\n{CAMERA}mqtt: {{host: b, password: {SECRET_PW}}}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert SECRET_PW not in str(info.value)
