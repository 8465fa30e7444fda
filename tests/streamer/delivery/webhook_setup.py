"""Helpers for the webhook tests (tests/streamer/delivery/): targets, settings and a sink
set to look at the outbox often and close quickly, metric samples, per-camera order."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from streamer.config import CameraConfig, EventsConfig, OutboxConfig, Settings, WebhookTargetConfig
from streamer.delivery.consumer_config import deliverers_of
from streamer.delivery.consumers import Consumers
from streamer.delivery.deliverer import LocalDeliverer
from streamer.delivery.events import PlateEvent
from streamer.domain.picture_links import PictureLinks
from streamer.foundation.metrics import Metrics
from streamer.foundation.shards import Shard

FAST = {"poll_interval_s": 0.2, "close_timeout_s": 1.0, "outbox_error_delay_s": 0.2}


def target(name: str, url: str, secret: str, **fields: Any) -> WebhookTargetConfig:
    fields.setdefault("retry_initial_delay_s", 0.05)
    fields.setdefault("retry_max_delay_s", 0.2)
    fields.setdefault("timeout_s", 2.0)
    return WebhookTargetConfig(name=name, url=url, secret=secret, **fields)


def settings(tmp_path: Path, *targets: WebhookTargetConfig, **outbox: Any) -> Settings:
    return Settings(
        cameras=[CameraConfig(name="gate", url="rtsp://cam/x")],
        webhooks=list(targets),
        events=EventsConfig(stdout=False),
        outbox=OutboxConfig(path=tmp_path / "outbox.sqlite3", **outbox),
    )


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


async def open_consumers(
    settings: Settings,
    metrics: Metrics,
    *,
    links: PictureLinks | None = None,
    frames: bool = False,
    shard: Shard | None = None,
    local: bool = False,
    installation: str = "0a1b2c3d",
    **options: Any,
) -> Consumers:
    """The consumers of ``settings`` on its own outbox, started: its webhook targets and MQTT
    (with ``local``, stdout and the file too) for the installation ``installation`` (its MQTT
    topics); ``options``: :class:`Consumers`'."""
    deliverers = deliverers_of(
        settings, metrics, links=links, frames=frames, shard=shard, installation=installation
    )
    if not local:
        deliverers = [d for d in deliverers if not isinstance(d, LocalDeliverer)]
    return await Consumers.open(settings.outbox, deliverers, metrics, **options)


async def open_sink(config: Settings, metrics: Metrics | None = None, **options: Any) -> Consumers:
    return await open_consumers(config, metrics or Metrics(), **{**FAST, **options})


async def settled_depth(
    sink: Consumers, metrics: Metrics, target_name: str, expected: float, within: float = 5.0
) -> float:
    """The outbox depth of ``target_name``, read again until it is ``expected`` or ``within``
    seconds have passed: a receiver sees an event before its answer (HTTP response, MQTT
    PUBACK) reaches the sink and the outbox marks it delivered."""
    deadline = time.monotonic() + within
    while True:
        await sink.refresh_metrics()
        depth = sample(metrics, "lpr_outbox_depth", target=target_name)
        if depth == expected or time.monotonic() > deadline:
            return depth
        await asyncio.sleep(0.05)


def assert_in_camera_order(received_ids: list[str], published: list[PlateEvent]) -> None:
    position = {event_id: i for i, event_id in enumerate(received_ids)}
    for camera in {e.camera for e in published}:
        sent = [e.event_id for e in published if e.camera == camera]
        assert sorted(sent, key=position.__getitem__) == sent, f"camera {camera} out of order"
