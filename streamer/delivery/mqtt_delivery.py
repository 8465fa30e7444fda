"""Events to the MQTT broker: the ``mqtt`` target of the outbox, and what the broker holds.

:class:`MqttDeliverer` is the :class:`~streamer.delivery.deliverer.Deliverer` of the outbox
target ``mqtt``. For each event (and each correction, ``type: plate.updated``) it publishes,
at QoS 1 and in per-camera order:

* ``<topic_prefix>/<camera>/plate``: the event as JSON, the same payload a webhook gets (the
  stored event, without the crop), plus signed ``crop_url`` / ``frame_url`` links when
  ``mqtt.public_base_url`` is set (streamer/domain/picture_links.py);
* ``<topic_prefix>/<camera>/last``, retained: the same JSON, so that a subscriber that comes
  later (Home Assistant's "last plate" sensor) sees the latest plate at once. A correction
  replaces it only when it corrects the pass ``last`` holds; beside it
  ``<topic_prefix>/<camera>/plate_image``, retained: the plate's crop (JPEG bytes, Home
  Assistant's image entity), replaced and cleared with it;
* ``<topic_prefix>/<camera>/alert`` for an event of a known-plate list marked ``alert``
  (with ``mqtt.alerts``), with ``"live"``: false when it is published later than
  ``mqtt.alert_max_age_s`` after the plate was last seen (it waited for the broker, or in a
  backlog): an automation must not open a gate for a car that left long ago.

The event is delivered when the broker acknowledged all of them; a failure (no connection, or
lost, or no acknowledgement within ``timeout_s``) leaves it pending in the outbox, sent again
later with the same ``event_id`` (at-least-once: a subscriber deduplicates by
``event_id`` and ``version``). While disconnected nothing is sent; once connected again the
backlog goes at once, oldest first per camera.

On each connect it publishes ``<topic_prefix>/status`` = ``online`` (retained; the will says
``offline``) and, with discovery, the retained Home Assistant configs of the running cameras
(streamer/delivery/home_assistant.py). It subscribes to this service's config topics: a
retained config of a camera that is not running (removed while the service was stopped) is
cleared, and so are those of a camera removed by a reload (:meth:`MqttDeliverer.set_cameras`).
It subscribes to the retained ``last`` messages too: an erasure of a plate
(:meth:`MqttDeliverer.forget`) clears the ``last`` that holds it and its ``plate_image``.
Given the cameras' state, it publishes each camera's health, retained
(streamer/delivery/mqtt_health.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import aiomqtt

from streamer.config import MQTT_TARGET, MqttConfig
from streamer.delivery import home_assistant as ha
from streamer.delivery.deliverer import Outcome, OutcomeKind
from streamer.delivery.mqtt_connection import (
    GOODBYE_TIMEOUT_S,
    MqttConnection,
    MqttUnavailableError,
)
from streamer.delivery.mqtt_health import HealthPublisher
from streamer.delivery.outbox_sql import PendingDelivery
from streamer.delivery.recent_events import payload_texts
from streamer.domain.cameras import CameraStatus
from streamer.domain.picture_links import PictureLinks, picture_urls
from streamer.foundation.backoff import backoff_delay
from streamer.foundation.metrics import Metrics
from streamer.foundation.supervisor import Supervisor

LOG = logging.getLogger(__name__)

#: The supervised part that keeps the broker connection up.
CONNECTION_PART = "mqtt:connection"
#: The supervised part that publishes the cameras' health.
HEALTH_PART = "mqtt:health"
#: What is retained of a camera's latest pass: its event, its plate's picture.
PASS_LEAVES = ("last", "plate_image")
#: Everything retained of a camera (cleared when it is removed).
RETAINED_LEAVES = (*PASS_LEAVES, "health")
#: What a delivery to the broker comes to (``lpr_mqtt_deliveries_total``'s outcomes): none is
#: a dead letter, the broker is tried again until it acknowledges.
OUTCOMES: tuple[OutcomeKind, ...] = ("delivered", "retry")


class MqttDeliverer:
    """The outbox's ``mqtt`` target (see the module docstring)."""

    name = MQTT_TARGET
    part = "mqtt:delivery"
    with_crop = True  # the plate_image topic

    def __init__(
        self,
        config: MqttConfig,
        metrics: Metrics,
        cameras: Iterable[str],
        links: PictureLinks | None = None,
        *,
        frames: bool = False,
        configured: Iterable[str] | None = None,
        replica: int | None = None,
        areas: Mapping[str, str | None] | None = None,
        camera_status: Callable[[], Iterable[CameraStatus]] | None = None,
    ) -> None:
        """``cameras``: those this service runs; ``configured``: every camera of the config
        (default: ``cameras``), whose retained configs are not stale even when another
        replica runs them; ``replica``: this replica's index when there are several (its
        own status topic); ``areas``: camera -> where it is (its Home Assistant device's
        suggested area); ``camera_status``: the cameras' state, published as their health.
        ``config`` must be resolved
        (:meth:`~streamer.config.MqttConfig.for_installation`)."""
        if not config.resolved:
            raise ValueError("the MQTT config still has {installation} to fill in")
        self.config = config
        self.status = ha.status_topic(config, replica)
        self.metrics = metrics
        metrics.known(metrics.mqtt_deliveries, *((outcome,) for outcome in OUTCOMES))
        self.max_concurrency = config.max_concurrency
        self.links = links
        self.frames = frames
        self.cameras: tuple[str, ...] = tuple(cameras)
        self.configured: set[str] = set(self.cameras if configured is None else configured)
        self.areas: dict[str, str | None] = dict(areas or {})
        self.health = (
            HealthPublisher(config, camera_status, lambda: self.cameras)
            if camera_status is not None
            else None
        )
        #: Cameras removed whose configs and ``last`` are still to be cleared.
        self._to_clear: set[str] = set()
        #: camera -> the payload its retained ``last`` holds (published here, or found there
        #: at connect).
        self._last: dict[str, dict[str, Any]] = {}
        #: Cameras whose ``last`` an erasure cleared while disconnected: done at connect.
        self._forgotten: set[str] = set()
        #: Passes erased (the event log's records): a retained ``last`` of one found at a
        #: connect is cleared, also after a restart, also when the broker was down at the time.
        self.erased_passes: set[str] = set()
        self._supervisor: Supervisor | None = None
        self.connection: MqttConnection | None = None

    def __repr__(self) -> str:
        return f"MqttDeliverer({self.config.broker!r})"

    def describe(self) -> str:
        return f"mqtt {self.config.broker}"

    # ------------------------------------------------------------------ life cycle

    async def start(self, supervisor: Supervisor, wake: Callable[[], None]) -> None:
        self._supervisor = supervisor
        self.connection = MqttConnection(
            self.config,
            self.metrics,
            on_connected=self._announce,
            on_message=self._retained,
            wake=wake,
            status=self.status,
        )
        supervisor.start(CONNECTION_PART, self.connection.run)
        if self.health is not None:
            supervisor.start(HEALTH_PART, partial(self.health.run, self.connection))
        LOG.info(
            "mqtt %s: publishing events under %s/<camera>/ (discovery: %s)",
            self.config.broker,
            self.config.topic_prefix,
            f"{self.config.discovery.prefix}, node {self.config.discovery.node_id}"
            if self.config.discovery.enabled
            else "off",
        )

    async def close(self) -> None:
        """Stop the connection: ``offline`` is published, then it disconnects; bounded, so
        that a broker that does not answer cannot hold up the service's stop."""
        if self._supervisor is not None:
            bound = GOODBYE_TIMEOUT_S + 2 * self.config.timeout_s
            try:
                async with asyncio.timeout(bound):
                    if self.health is not None:
                        await self._supervisor.stop(HEALTH_PART)
                    await self._supervisor.stop(CONNECTION_PART)
            except TimeoutError:
                LOG.warning(
                    "mqtt %s: the connection did not close within %.0f s; left behind",
                    self.config.broker,
                    bound,
                )

    @property
    def parts(self) -> tuple[str, ...]:
        if self._supervisor is None:
            return ()
        return (CONNECTION_PART, HEALTH_PART) if self.health is not None else (CONNECTION_PART,)

    @property
    def ready(self) -> bool:
        return self.connection is not None and self.connection.connected

    @property
    def problem(self) -> str | None:
        return self.connection.problem if self.connection is not None else None

    # ------------------------------------------------------------------ events

    async def deliver(self, item: PendingDelivery) -> Outcome:
        connection = self.connection
        if connection is None:
            raise RuntimeError(f"{self!r} is not started")
        payload = dict(item.payload)
        if self.config.public_base_url is not None:
            payload.update(
                picture_urls(
                    self.config.public_base_url, item.event_id, self.links, frame=self.frames
                )
            )
        body = ha.message_json(payload)
        camera, pass_id = item.camera, str(payload.get("event_id", item.event_id))
        try:
            await connection.publish(ha.camera_topic(self.config, camera, "plate"), body)
            held = self._last.get(camera, {}).get("event_id", pass_id)
            if payload.get("version", 1) == 1 or held == pass_id:
                last = ha.camera_topic(self.config, camera, "last")
                # Known before the broker has it: an erasure meanwhile clears it all the same.
                self._last[camera] = payload
                await connection.publish(last, body, retain=True)
                if item.crop is not None:
                    await connection.publish(
                        ha.camera_topic(self.config, camera, "plate_image"),
                        item.crop,
                        retain=True,
                        content_type="image/jpeg",
                    )
            if self.config.alerts and payload.get("alert"):
                alert = {**payload, "live": self._live(payload)}
                await connection.publish(
                    ha.camera_topic(self.config, camera, "alert"), ha.message_json(alert)
                )
        except MqttUnavailableError as exc:
            return Outcome("retry", str(exc))
        return Outcome("delivered")

    def _live(self, payload: dict[str, Any]) -> bool:
        """Whether an alert published now is still live: its plate was last seen within
        ``mqtt.alert_max_age_s`` (a late one is logged)."""
        age = ha.seen_ago_s(payload, time.time())
        if age is None or age <= self.config.alert_max_age_s:
            return True  # (every event says when: streamer/delivery/events.py)
        LOG.info(
            "mqtt: alert %s on %s published %.0f s after its plate was seen (over "
            "mqtt.alert_max_age_s): not live",
            *(payload.get("event_id"), payload.get("camera"), age),
        )
        return False

    def retry_delay(self, attempts: int, outcome: Outcome, rng: random.Random) -> float:
        del outcome
        config = self.config
        return backoff_delay(attempts, config.retry_initial_delay_s, config.retry_max_delay_s, rng)

    def count(self, kind: OutcomeKind) -> None:
        self.metrics.mqtt_deliveries.labels(kind).inc()

    # ------------------------------------------------------------------ what the broker holds

    async def set_cameras(
        self,
        cameras: Sequence[str],
        configured: Iterable[str] | None = None,
        areas: Mapping[str, str | None] | None = None,
    ) -> None:
        """The running cameras changed (a reload): announce the new ones (and those moved to
        another area), clear the removed ones' configs and what is retained of them (now, or
        at the next connect). ``configured``: every camera of the new config (default:
        ``cameras``)."""
        removed = set(self.cameras) - set(cameras)
        areas = dict(areas) if areas is not None else self.areas
        added = [c for c in cameras if c not in self.cameras or areas.get(c) != self.areas.get(c)]
        self.areas = areas
        self.cameras = tuple(cameras)
        self.configured = set(cameras if configured is None else configured)
        self._to_clear = (self._to_clear | removed) - set(cameras)
        connection = self.connection
        if connection is None or not connection.connected:
            return  # done at the next connect
        try:
            await self._clear_removed()
            for camera in added:
                await self._announce_camera(camera)
        except MqttUnavailableError as exc:  # done again at the next connect
            LOG.warning("mqtt %s: discovery update deferred: %s", self.config.broker, exc)

    async def _announce(self, client: aiomqtt.Client) -> None:
        """On each connect: ``online``, the cameras' discovery configs, stale ones cleared."""
        config = self.config
        assert self.connection is not None
        try:
            await self.connection.publish(self.status, ha.ONLINE, retain=True)
            await self._clear_removed()
            await self._clear_forgotten()
            for camera in self.cameras:
                await self._announce_camera(camera)
            if self.health is not None:  # every camera's, at once
                self.health.reconnected()
                await self.health.publish_changes(self.connection)
            # Retained: the cameras' last events (for an erasure), stale discovery configs.
            await client.subscribe(ha.camera_topic(config, "+", "last"), qos=1)
            if config.discovery.enabled:
                await client.subscribe(ha.config_filter(config), qos=1)
        except (MqttUnavailableError, aiomqtt.MqttError) as exc:
            # The connection is going down; the next one announces again.
            LOG.debug("mqtt %s: announce failed: %s", config.broker, exc)

    async def _announce_camera(self, camera: str) -> None:
        assert self.connection is not None
        if not self.config.discovery.enabled:
            return
        configs = ha.discovery_configs(
            self.config,
            camera,
            self.status,
            area=self.areas.get(camera),
            health=self.health is not None,
        )
        for topic in ha.config_topics(self.config, camera):
            payload = ha.message_json(configs[topic]) if topic in configs else ""
            await self.connection.publish(topic, payload, retain=True)

    async def _clear_removed(self) -> None:
        assert self.connection is not None
        async with self.health.lock if self.health is not None else contextlib.nullcontext():
            await self._clear_cameras()

    async def _clear_cameras(self) -> None:
        assert self.connection is not None
        for camera in sorted(self._to_clear):
            for topic in ha.config_topics(self.config, camera):
                await self.connection.publish(topic, "", retain=True)
            for leaf in RETAINED_LEAVES:
                await self.connection.publish(
                    ha.camera_topic(self.config, camera, leaf), "", retain=True
                )
            if self.health is not None:
                self.health.forget(camera)
            self._to_clear.discard(camera)
            self._last.pop(camera, None)
            LOG.info("mqtt %s: camera %s removed from discovery", self.config.broker, camera)

    async def _retained(self, message: aiomqtt.Message) -> None:
        """A retained message found on subscribing: a ``last`` is remembered (an erasure may
        have to clear it); a config or ``last`` of a camera not running is cleared."""
        topic, payload = message.topic.value, message.payload
        if not isinstance(payload, bytes | bytearray) or not payload:
            return
        camera = ha.camera_of(self.config, topic) or ha.last_camera_of(self.config, topic)
        if camera is None:
            return
        if camera not in self.configured:  # (one another replica runs is not stale)
            self._to_clear.add(camera)
            with contextlib.suppress(MqttUnavailableError):  # the next connect finds it again
                await self._clear_removed()
        elif topic.endswith("/last") and camera in self.cameras and camera not in self._last:
            with contextlib.suppress(ValueError):
                held = json.loads(payload)
                if isinstance(held, dict):
                    self._last[camera] = held
            if camera in self._last and self._last[camera].get("event_id") in self.erased_passes:
                await self.erase_passes(())  # an erasure's retained copy: cleared now

    async def forget(self, *, plate: str | None = None, event_id: str | None = None) -> int:
        """Clear the retained ``last`` of every camera whose last event holds ``plate`` (any
        text of it) or is of the pass ``event_id`` (an erasure); how many."""
        cameras = [
            camera
            for camera, held in self._last.items()
            if held.get("event_id") == event_id
            or (plate is not None and plate in payload_texts(held))
        ]
        for camera in cameras:
            del self._last[camera]
            self._forgotten.add(camera)
        connection = self.connection
        if cameras and connection is not None and connection.connected:
            with contextlib.suppress(MqttUnavailableError):  # else at the next connect
                await self._clear_forgotten()
        return len(cameras)

    async def erase_passes(self, pass_ids: Iterable[str]) -> int:
        """Passes erased (by id): the retained ``last`` that holds one is cleared now, or at
        the next connect, and one found there later is too; how many cleared now."""
        self.erased_passes.update(pass_ids)
        cameras = [
            c for c, held in self._last.items() if held.get("event_id") in self.erased_passes
        ]
        for camera in cameras:
            del self._last[camera]
            self._forgotten.add(camera)
        connection = self.connection
        if self._forgotten and connection is not None and connection.connected:
            with contextlib.suppress(MqttUnavailableError):  # else at the next connect
                await self._clear_forgotten()
        return len(cameras)

    async def _clear_forgotten(self) -> None:
        assert self.connection is not None
        for camera in sorted(self._forgotten):
            for leaf in PASS_LEAVES:  # the pass and its picture
                await self.connection.publish(
                    ha.camera_topic(self.config, camera, leaf), "", retain=True
                )
            self._forgotten.discard(camera)
