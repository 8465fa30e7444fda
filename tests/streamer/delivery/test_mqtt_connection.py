"""What the MQTT connection says before it connects: a password that would cross the network
in clear text is warned about, once, when the connection is made."""

from __future__ import annotations

import logging

import pytest

from streamer.config import MqttConfig
from streamer.delivery.mqtt_connection import MqttConnection
from streamer.foundation.metrics import Metrics


def _connection(config: MqttConfig) -> MqttConnection:
    async def nothing(*args: object) -> None:
        return None

    return MqttConnection(
        config, Metrics(), on_connected=nothing, on_message=nothing, wake=lambda: None
    )


@pytest.mark.parametrize(
    ("options", "warned"),
    [
        ({"host": "broker.example", "username": "lpr", "password": "s3cret-pw"}, True),
        ({"host": "192.0.2.10", "username": "lpr", "password": "s3cret-pw"}, True),
        (
            {
                "host": "broker.example",
                "username": "lpr",
                "password": "s3cret-pw",
                "tls": {"enabled": True},
            },
            False,
        ),
        ({"host": "127.0.0.1", "username": "lpr", "password": "s3cret-pw"}, False),  # this host
        ({"host": "broker.example"}, False),  # nothing secret to read
    ],
)
def test_a_password_over_plain_tcp_is_warned_about(
    options: dict, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="streamer.delivery.mqtt_connection"):
        _connection(MqttConfig.model_validate(options))
    lines = [r.getMessage() for r in caplog.records if "plain TCP" in r.getMessage()]
    assert len(lines) == (1 if warned else 0)
    assert "s3cret-pw" not in caplog.text
