"""The root of the config file: :class:`Settings`, its sections and the checks across them."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from streamer.config.base import Section
from streamer.config.cameras import CameraConfig
from streamer.config.decisions import EventsConfig, KnownPlatesLists, TrackerConfig
from streamer.config.delivery import (
    FILE_CONSUMER,
    HISTORY_CONSUMER,
    LOCAL_CONSUMERS,
    STDOUT_CONSUMER,
    OutboxConfig,
    WebhookTargetConfig,
)
from streamer.config.inference import TritonConfig
from streamer.config.mqtt import MQTT_TARGET, MqttConfig
from streamer.config.service import LogConfig, MetricsConfig, ReloadConfig, WebConfig
from streamer.config.storage import StorageConfig
from streamer.domain.known_plates import KnownList, KnownPlates


class Settings(Section):
    """The whole config file."""

    cameras: list[CameraConfig] = Field(
        min_length=1, max_length=256, description="The cameras to read (at least one)."
    )
    triton: TritonConfig = Field(default_factory=TritonConfig, description=TritonConfig.__doc__)
    tracker: TrackerConfig = Field(default_factory=TrackerConfig, description=TrackerConfig.__doc__)
    events: EventsConfig = Field(default_factory=EventsConfig, description=EventsConfig.__doc__)
    web: WebConfig = Field(
        default_factory=dict,  # validated like a written section: the key path resolves
        validate_default=True,
        description=WebConfig.__doc__,
    )
    metrics: MetricsConfig = Field(
        default_factory=MetricsConfig,
        validate_default=True,  # so that the port check below sees a default metrics.port
        description=MetricsConfig.__doc__,
    )
    log: LogConfig = Field(default_factory=LogConfig, description=LogConfig.__doc__)
    reload: ReloadConfig = Field(default_factory=ReloadConfig, description=ReloadConfig.__doc__)
    known_plates: KnownPlatesLists = Field(
        default_factory=dict,
        description="Known-plate lists (label -> list of plates or patterns) every decided "
        "text is matched against (docs/events.md#known-plates).",
    )
    webhooks: list[WebhookTargetConfig] = Field(
        default_factory=list,
        max_length=32,
        description="Webhook targets every event is delivered to (see docs/events.md); "
        "none: no webhooks.",
    )
    mqtt: MqttConfig | None = Field(
        None,
        description="The MQTT broker events are also published to, with Home Assistant "
        "discovery (see docs/events.md#mqtt); absent: no MQTT.",
    )
    outbox: OutboxConfig = Field(
        # A mapping, validated like a written section, so that the default path
        # resolves against the config file's folder too.
        default_factory=dict,
        validate_default=True,
        description=OutboxConfig.__doc__,
    )
    storage: StorageConfig = Field(
        default_factory=dict,  # validated like a written section: the default path resolves
        validate_default=True,
        description=StorageConfig.__doc__,
    )

    @field_validator("cameras")
    @classmethod
    def _unique_names(cls, cameras: list[CameraConfig]) -> list[CameraConfig]:
        first: dict[str, int] = {}
        for index, camera in enumerate(cameras):
            if camera.name in first:
                raise ValueError(
                    f"cameras[{first[camera.name]}] and cameras[{index}] are both named "
                    f"{camera.name!r}: camera names must be unique"
                )
            first[camera.name] = index
        return cameras

    @field_validator("webhooks")
    @classmethod
    def _unique_targets(cls, targets: list[WebhookTargetConfig]) -> list[WebhookTargetConfig]:
        first: dict[str, int] = {}
        for index, target in enumerate(targets):
            if target.name in first:
                raise ValueError(
                    f"webhooks[{first[target.name]}] and webhooks[{index}] are both named "
                    f"{target.name!r}: target names must be unique"
                )
            first[target.name] = index
        return targets

    @field_validator("mqtt")
    @classmethod
    def _mqtt_target_free(cls, mqtt: MqttConfig | None, info: ValidationInfo) -> MqttConfig | None:
        names = [t.name for t in info.data.get("webhooks") or ()]
        if mqtt is not None and MQTT_TARGET in names:
            raise ValueError(
                f"webhooks[{names.index(MQTT_TARGET)}] is named {MQTT_TARGET!r}, the outbox's "
                "name for the MQTT broker: rename that webhook target"
            )
        return mqtt

    @property
    def consumers(self) -> list[str]:
        """The event log's consumers, in order: ``history`` (with ``storage``), ``stdout``,
        ``file`` (as ``events`` says), then :attr:`delivery_targets`."""
        names = [HISTORY_CONSUMER] if self.storage.enabled else []
        names += [STDOUT_CONSUMER] if self.events.stdout else []
        names += [FILE_CONSUMER] if self.events.file is not None else []
        return names + self.delivery_targets

    @property
    def delivery_targets(self) -> list[str]:
        """The remote consumers: every enabled webhook target, then ``mqtt`` if enabled."""
        names = [t.name for t in self.webhooks if t.enabled]
        if self.mqtt is not None and self.mqtt.enabled:
            names.append(MQTT_TARGET)
        return names

    @property
    def configured_targets(self) -> list[str]:
        """Every consumer the config names, enabled or not (the dead-letter CLI's choices)."""
        names = [n for n in self.consumers if n in LOCAL_CONSUMERS]
        names += [t.name for t in self.webhooks]
        if self.mqtt is not None:
            names.append(MQTT_TARGET)
        return names

    @field_validator("metrics")
    @classmethod
    def _distinct_ports(cls, metrics: MetricsConfig, info: ValidationInfo) -> MetricsConfig:
        web = info.data.get("web")
        if metrics.enabled and web is not None and metrics.port == web.port != 0:
            raise ValueError(
                f"metrics.port and web.port are both {web.port}: choose another port for one"
            )
        return metrics

    def known_plates_for(self, camera: CameraConfig) -> KnownPlates:
        """The camera's known-plate lists, then the global ones it does not override."""
        lists = {**camera.known_plates}
        lists.update({k: v for k, v in self.known_plates.items() if k not in lists})
        return KnownPlates(
            KnownList(label, tuple(c.plates), c.max_distance, c.snap, c.alert)
            for label, c in lists.items()
        )

    def known_plate_labels(self) -> list[str]:
        """Every known-plate list's label, global or a camera's, sorted."""
        labels = set(self.known_plates)
        for camera in self.cameras:
            labels.update(camera.known_plates)
        return sorted(labels)

    @property
    def enabled_cameras(self) -> tuple[CameraConfig, ...]:
        return tuple(c for c in self.cameras if c.enabled)

    @property
    def camera_areas(self) -> dict[str, str | None]:
        """Enabled camera -> where it is (``cameras[].area``)."""
        return {c.name: c.area for c in self.enabled_cameras}

    def redacted(self) -> dict[str, Any]:
        """The settings as plain JSON-able data, safe to log: URLs redacted, token masked."""
        data = self.model_dump(mode="json")
        for camera, dumped in zip(self.cameras, data["cameras"], strict=True):
            dumped["url"] = camera.redacted_url
        for target, dumped in zip(self.webhooks, data["webhooks"], strict=True):
            dumped["url"] = target.redacted_url
        return data
