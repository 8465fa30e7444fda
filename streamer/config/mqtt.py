"""The ``mqtt:`` section: the broker events are published to, and Home Assistant discovery."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from streamer.config.base import Section, empty_to_none, resolve_path
from streamer.config.delivery import check_http_url

#: The outbox target of the MQTT broker (a webhook target may not take this name).
MQTT_TARGET = "mqtt"
#: One topic level: no wildcard, no separator, no NUL (MQTT 3.1.1 s. 4.7).
_TOPIC_LEVELS = re.compile(r"^[^#+/\x00]+(/[^#+/\x00]+)*$")
_NODE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: Stands for this installation's id (streamer/store/installation.py) in ``topic_prefix`` and
#: ``discovery.node_id``: two installations on one broker keep to their own topics.
INSTALLATION = "{installation}"
DEFAULT_TOPIC_PREFIX = f"lpr/{INSTALLATION}"
DEFAULT_NODE_ID = f"lpr-{INSTALLATION}"


def _check_topic(topic: str) -> str:
    if not _TOPIC_LEVELS.match(topic):
        raise ValueError(f"{topic!r} is not a topic: no '#', '+', empty or leading '/'")
    return topic


#: The first levels of a topic: no wildcard, no empty level.
TopicPrefix = Annotated[str, AfterValidator(_check_topic)]


def default_client_id() -> str:
    """``lpr-<host name>``: distinct per machine, the same across restarts."""
    return f"lpr-{socket.gethostname()}"[:64]


class MqttTlsConfig(Section):
    """TLS to the broker."""

    enabled: bool = Field(False, description="Connect over TLS (the port is usually 8883).")
    ca_file: Path | None = Field(
        None,
        description="PEM file of the CA(s) the broker's certificate is checked against "
        "(relative: to the config file's folder); absent: the system's CAs.",
    )
    cert_file: Path | None = Field(
        None, description="PEM client certificate, for brokers that ask for one."
    )
    key_file: Path | None = Field(None, description="PEM key of the client certificate.")
    check_hostname: bool = Field(
        True,
        description="Check that the broker's certificate names the host connected to; false "
        "only for test brokers.",
    )

    @field_validator("ca_file", "cert_file", "key_file", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return empty_to_none(value)

    @field_validator("ca_file", "cert_file", "key_file")
    @classmethod
    def _resolve(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else Path(resolve_path(value, info))

    @model_validator(mode="after")
    def _pair(self) -> MqttTlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together: give both or neither")
        return self


class DiscoveryConfig(Section):
    """Home Assistant MQTT discovery: the cameras appear as entities by themselves."""

    enabled: bool = Field(
        True,
        description="Publish retained discovery configs: a device for the service, per camera "
        "a 'last plate' sensor and a known-plate alert binary sensor.",
    )
    prefix: TopicPrefix = Field(
        "homeassistant",
        min_length=1,
        max_length=128,
        description="Home Assistant's discovery prefix.",
    )
    node_id: str = Field(
        DEFAULT_NODE_ID,
        min_length=1,
        max_length=64,
        description="This service's id in the discovery topics and unique ids (A-Z a-z 0-9 _ "
        "-; {installation}: the installation's id); each service on one broker needs its own.",
    )
    alert_off_delay_s: int = Field(
        30,
        ge=1,
        le=86_400,
        description="Seconds the alert binary sensor stays on after a known-plate alert.",
    )

    @field_validator("node_id")
    @classmethod
    def _check_node_id(cls, node_id: str) -> str:
        if not _NODE_ID.match(node_id.replace(INSTALLATION, "x")):
            raise ValueError(f"{node_id!r}: use 1-64 of A-Z a-z 0-9 _ - (and {INSTALLATION})")
        return node_id


class MqttConfig(Section):
    """The MQTT broker every event is published to (from the outbox: nothing is lost while
    it is down), with Home Assistant discovery (docs/events.md#mqtt)."""

    enabled: bool = Field(True, description="Publish to this broker; false keeps it configured.")
    host: str = Field(min_length=1, max_length=255, description="The broker's host name or IP.")
    port: int | None = Field(
        None, ge=1, le=65535, description="The broker's port (default 1883, 8883 with TLS)."
    )
    username: str | None = Field(None, max_length=256, description="User name, if any.")
    password: SecretStr | None = Field(
        None,
        description="Password (keep it in the environment: ${MQTT_PASSWORD}). Never logged.",
    )
    client_id: str = Field(
        default_factory=default_client_id,
        min_length=1,
        max_length=64,
        description="MQTT client id (default lpr-<host name>); each service on one broker "
        "needs its own.",
    )
    protocol: Literal["auto", "5", "3.1.1"] = Field(
        "auto",
        description="MQTT version: auto tries 5 and falls back to 3.1.1 for a broker that "
        "does not speak it.",
    )
    keepalive_s: int = Field(
        30, ge=5, le=3600, description="Seconds between keep-alive pings (the broker's will)."
    )
    timeout_s: float = Field(
        10.0, gt=0, le=300, description="Seconds a connect or a publish may take."
    )
    max_concurrency: int = Field(
        8,
        ge=1,
        le=64,
        description="Events in flight at once (each camera's go one at a time, in order).",
    )
    retry_initial_delay_s: float = Field(
        1.0,
        ge=0.05,  # no reconnect storm, whatever the config says
        le=3600,
        description="Backoff before the first reconnect (and retry of a publish that timed "
        "out); doubles on each failure.",
    )
    retry_max_delay_s: float = Field(
        30.0,
        ge=0.05,
        le=3600,
        description="Cap of that backoff (>= retry_initial_delay_s).",
    )
    topic_prefix: TopicPrefix = Field(
        DEFAULT_TOPIC_PREFIX,
        min_length=1,
        max_length=128,
        description="Topics are <topic_prefix>/<camera>/plate, .../last (retained), "
        ".../alert and <topic_prefix>/status; {installation} stands for the installation's "
        "id (logged at start), so that two installations on one broker never share a topic.",
    )
    alerts: bool = Field(
        True, description="Publish known-plate alerts on <topic_prefix>/<camera>/alert too."
    )
    alert_max_age_s: float = Field(
        60.0,
        ge=1,
        le=86_400,
        description="An alert published later than this after its plate was last seen (the "
        'broker was down, a backlog) carries "live": false and does not turn the alert '
        'sensor on; a fresh one carries "live": true.',
    )
    public_base_url: str | None = Field(
        None,
        max_length=4096,
        description="Base URL of this service for subscribers: payloads then carry signed "
        "crop_url (and frame_url) links, as webhooks with crop: url do; absent: no links.",
    )
    tls: MqttTlsConfig = Field(default_factory=MqttTlsConfig, description=MqttTlsConfig.__doc__)
    discovery: DiscoveryConfig = Field(
        default_factory=DiscoveryConfig, description=DiscoveryConfig.__doc__
    )

    @field_validator("username", "public_base_url", "password", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return empty_to_none(value)

    @field_validator("host")
    @classmethod
    def _check_host(cls, host: str) -> str:
        if "://" in host or "/" in host or host != host.strip():
            raise ValueError(f"give the broker's host name or IP only, got {host!r}")
        return host

    @field_validator("public_base_url")
    @classmethod
    def _check_base_url(cls, url: str | None) -> str | None:
        return None if url is None else check_http_url(url, "public_base_url").rstrip("/")

    @field_validator("retry_max_delay_s")
    @classmethod
    def _check_retry_max(cls, max_delay: float, info: ValidationInfo) -> float:
        initial = info.data.get("retry_initial_delay_s")
        if initial is not None and max_delay < initial:
            raise ValueError(f"must be >= retry_initial_delay_s ({initial:g}), got {max_delay:g}")
        return max_delay

    @model_validator(mode="after")
    def _password_needs_user(self) -> MqttConfig:
        if self.password is not None and self.username is None:
            raise ValueError("password is set without username: give the user name too")
        return self

    @property
    def resolved(self) -> bool:
        """Whether no ``{installation}`` is left to fill in (:meth:`for_installation`)."""
        return INSTALLATION not in self.topic_prefix + self.discovery.node_id

    def for_installation(self, installation: str) -> MqttConfig:
        """This config with ``{installation}`` replaced by ``installation``'s id."""
        discovery = self.discovery.model_copy(
            update={"node_id": self.discovery.node_id.replace(INSTALLATION, installation)}
        )
        prefix = self.topic_prefix.replace(INSTALLATION, installation)
        return self.model_copy(update={"topic_prefix": prefix, "discovery": discovery})

    @property
    def broker_port(self) -> int:
        if self.port is not None:
            return self.port
        return 8883 if self.tls.enabled else 1883

    @property
    def broker(self) -> str:
        """``host:port``, as logs and readiness name the broker (never the credentials)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.broker_port}"
