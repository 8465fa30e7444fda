"""Each camera's health on the broker: ``<topic_prefix>/<camera>/health``, retained, for Home
Assistant's health sensor (streamer/delivery/home_assistant.py).

While the connection is up, every ``HEALTH_INTERVAL_S`` the cameras this service runs are
read (``CameraStatus``, as the live view shows them) and a camera's payload is published
when it changed; after a reconnect every camera's again. Nothing is queued while the broker
is away: health is a state, the next one replaces it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from streamer.config import MqttConfig
from streamer.delivery import home_assistant as ha
from streamer.delivery.mqtt_connection import MqttConnection, MqttUnavailableError
from streamer.domain.cameras import CameraStatus

LOG = logging.getLogger(__name__)

#: Seconds between two looks at the cameras' health.
HEALTH_INTERVAL_S = 5.0


class HealthPublisher:
    """Publishes the health of ``cameras()`` from ``status()`` on ``connection``."""

    def __init__(
        self,
        config: MqttConfig,
        status: Callable[[], Iterable[CameraStatus]],
        cameras: Callable[[], Iterable[str]],
        interval_s: float = HEALTH_INTERVAL_S,
    ) -> None:
        self.config = config
        self.status = status
        self.cameras = cameras
        self.interval_s = interval_s
        #: Held while publishing; the deliverer holds it while it clears a removed camera, so
        #: that no health of it lands after the clearing.
        self.lock = asyncio.Lock()
        self._published: dict[str, dict[str, Any]] = {}

    def reconnected(self) -> None:
        """The broker may have lost what was published: everything again."""
        self._published.clear()

    def forget(self, camera: str) -> None:
        self._published.pop(camera, None)

    async def run(self, connection: MqttConnection) -> None:
        while True:
            if connection.connected:
                with contextlib.suppress(MqttUnavailableError):  # the next connect: again
                    await self.publish_changes(connection)
            await asyncio.sleep(self.interval_s)

    async def publish_changes(self, connection: MqttConnection) -> int:
        """Publish every camera's health that changed since it was last published; how many."""
        published = 0
        async with self.lock:
            running = set(self.cameras())
            for status in self.status():
                if status.name not in running:
                    continue
                payload = ha.health_payload(status)
                if self._published.get(status.name) == payload:
                    continue
                topic = ha.camera_topic(self.config, status.name, "health")
                await connection.publish(topic, ha.message_json(payload), retain=True)
                self._published[status.name] = payload
                published += 1
        return published
