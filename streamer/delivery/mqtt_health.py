"""Each camera's health on the broker: ``<topic_prefix>/<camera>/health``, retained, for Home
Assistant's health sensor (streamer/delivery/home_assistant.py).

While the connection is up, every ``HEALTH_INTERVAL_S`` the cameras this service runs are
read (``CameraStatus``, as the live view shows them) and a camera's payload is published
when its state or last error changed, and otherwise at most every ``HEALTH_REFRESH_S`` when
only its rates did (they change with every look); after a reconnect every camera's again.
Nothing is queued while the broker is away: health is a state, the next one replaces it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from streamer.config import MqttConfig
from streamer.delivery import home_assistant as ha
from streamer.delivery.mqtt_connection import MqttConnection, MqttUnavailableError
from streamer.domain.cameras import CameraStatus

LOG = logging.getLogger(__name__)

#: Seconds between two looks at the cameras' health.
HEALTH_INTERVAL_S = 5.0
#: A camera whose state did not change is published again after this long (its rates).
HEALTH_REFRESH_S = 60.0
#: What changes a camera's health at once (the rest are rates).
_STATE_KEYS = ("state", "last_error")


class HealthPublisher:
    """Publishes the health of ``cameras()`` from ``status()`` on ``connection``."""

    def __init__(
        self,
        config: MqttConfig,
        status: Callable[[], Iterable[CameraStatus]],
        cameras: Callable[[], Iterable[str]],
        interval_s: float = HEALTH_INTERVAL_S,
        refresh_s: float = HEALTH_REFRESH_S,
    ) -> None:
        self.config = config
        self.status = status
        self.cameras = cameras
        self.interval_s = interval_s
        self.refresh_s = refresh_s
        #: Held while publishing; the deliverer holds it while it clears a removed camera, so
        #: that no health of it lands after the clearing.
        self.lock = asyncio.Lock()
        #: camera -> what was published last, and when (time.monotonic()).
        self._published: dict[str, tuple[dict[str, Any], float]] = {}

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
                if not self._due(status.name, payload):
                    continue
                topic = ha.camera_topic(self.config, status.name, "health")
                await connection.publish(topic, ha.message_json(payload), retain=True)
                self._published[status.name] = (payload, time.monotonic())
                published += 1
        return published

    def _due(self, camera: str, payload: dict[str, Any]) -> bool:
        last = self._published.get(camera)
        if last is None:
            return True
        before, at = last
        if any(before.get(k) != payload.get(k) for k in _STATE_KEYS):
            return True
        return before != payload and time.monotonic() - at >= self.refresh_s
