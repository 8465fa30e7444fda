"""Which deliverer each consumer of a config gets, and whether a reload's deliverer is the
one already running (streamer/delivery/consumers.py, ``Consumers.replace``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from streamer.config import Settings
from streamer.delivery.deliverer import Deliverer
from streamer.delivery.jsonl_delivery import JsonLinesDeliverer
from streamer.delivery.mqtt_delivery import MqttDeliverer
from streamer.delivery.webhook_delivery import WebhookPoster
from streamer.domain.cameras import CameraStatus
from streamer.domain.picture_links import PictureLinks
from streamer.foundation.metrics import Metrics
from streamer.foundation.shards import Shard

LOG = logging.getLogger(__name__)


def same_consumer(running: Deliverer, new: Deliverer) -> bool:
    """Whether ``new`` is ``running`` again (same kind, same config)."""
    if type(running) is not type(new):
        return False
    old_config, new_config = getattr(running, "config", None), getattr(new, "config", None)
    if old_config is None or new_config is None:
        return old_config is new_config and running.describe() == new.describe()
    return bool(old_config == new_config)


def opens_alone(deliverer: Deliverer) -> bool:
    """Whether ``deliverer`` can be opened while the one it replaces still runs (an HTTP
    session can; an MQTT client cannot: the broker drops one of two with its client id)."""
    return not isinstance(deliverer, MqttDeliverer)


def deliverers_of(
    settings: Settings,
    metrics: Metrics,
    *,
    links: PictureLinks | None = None,
    frames: bool = False,
    shard: Shard | None = None,
    history: Deliverer | None = None,
    installation: str | None = None,
    camera_status: Callable[[], Iterable[CameraStatus]] | None = None,
) -> list[Deliverer]:
    """A deliverer per consumer of ``settings``, in the order of
    :attr:`~streamer.config.Settings.consumers`: ``history`` (the service makes it: the
    store is its), stdout and the file, every enabled webhook target, MQTT. ``links`` signs
    the picture links of ``crop: url`` targets and MQTT (None: plain paths, which need the
    token); ``frames``: the history keeps vehicle pictures (a ``frame_url`` beside the
    crop's); ``shard``: the cameras this replica runs (default: all); ``installation``: the
    id that fills in ``{installation}`` in the MQTT topics (streamer/store/installation.py);
    ``camera_status``: the running cameras' state, for MQTT's health topics."""
    deliverers: list[Deliverer] = [history] if history is not None else []
    if settings.events.stdout:
        deliverers.append(JsonLinesDeliverer(metrics))
    if settings.events.file is not None:
        deliverers.append(JsonLinesDeliverer(metrics, settings.events.file))
    for target in settings.webhooks:
        if target.enabled:
            deliverers.append(WebhookPoster(target, metrics, links, frames=frames))
            metrics.webhook_target(target.name)
    mqtt = settings.mqtt
    if mqtt is not None and mqtt.enabled:
        shard = shard or Shard()
        configured = [c.name for c in settings.enabled_cameras]
        held = [name for name in configured if shard.holds(name)]
        replica = shard.index if shard.sharded else None
        if installation is not None:
            mqtt = mqtt.for_installation(installation)
        deliverers.append(
            MqttDeliverer(
                mqtt,
                metrics,
                held,
                links,
                frames=frames,
                configured=configured,
                replica=replica,
                areas=settings.camera_areas,
                camera_status=camera_status,
            )
        )
    return deliverers


def log_targets(deliverers: Iterable[Deliverer]) -> None:
    """One line per webhook target: where it delivers (the URL redacted)."""
    for deliverer in deliverers:
        if isinstance(deliverer, WebhookPoster):
            config = deliverer.config
            LOG.info(
                "webhook %s: delivering to %s (crop: %s, up to %d in flight)",
                config.name,
                config.redacted_url,
                config.crop,
                config.max_concurrency,
            )
