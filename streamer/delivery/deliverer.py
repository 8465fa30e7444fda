"""What the outbox's delivery workers deliver through: a :class:`Deliverer` per target.

A target of the outbox (a webhook receiver, the MQTT broker) is served by one
:class:`~streamer.delivery.delivery_worker.DeliveryWorker`, which takes the target's pending
events in per-camera order and hands each to the target's :class:`Deliverer`. The deliverer
sends it and says what that came to (:class:`Outcome`): delivered, retry (and when), or a
dead letter. It never raises for trouble on the network: only a bug does.

Deliverers: :class:`~streamer.delivery.webhook_delivery.WebhookPoster` (a signed POST) and
:class:`~streamer.delivery.mqtt_delivery.MqttDeliverer` (QoS 1 publishes).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from streamer.delivery.outbox_sql import PendingDelivery
from streamer.pipeline.supervisor import Supervisor

OutcomeKind = Literal["delivered", "retry", "dead"]


@dataclass(frozen=True)
class Outcome:
    """What one delivery attempt came to."""

    kind: OutcomeKind
    error: str | None = None
    #: How long the receiver asked to wait (an HTTP ``Retry-After``), when it did.
    retry_after_s: float | None = None


class Deliverer(Protocol):
    """One outbox target's way out (see the module docstring)."""

    #: The outbox target this deliverer serves (metrics, logs, the dead-letter CLI).
    name: str
    #: The supervised part its worker runs as (``webhook:<target>``, ``mqtt:delivery``).
    part: str
    #: Deliveries in flight at once (one per camera: per-camera order).
    max_concurrency: int
    #: Whether :meth:`deliver` needs the crop JPEG of the pending delivery.
    with_crop: bool

    def describe(self) -> str:
        """How logs name the target ("webhook crm", "mqtt broker.local:1883")."""
        ...

    async def start(self, supervisor: Supervisor, wake: Callable[[], None]) -> None:
        """Open what it needs; its own long-lived parts run under ``supervisor``. ``wake``
        wakes its worker (a broker that is connected again, say)."""
        ...

    async def close(self) -> None:
        """Close what :meth:`start` opened (after the worker stopped). Idempotent."""
        ...

    @property
    def parts(self) -> tuple[str, ...]:
        """The supervised parts :meth:`start` started."""
        ...

    @property
    def ready(self) -> bool:
        """Whether it can deliver now; while False the worker sends nothing, and when it
        turns True again the target's pending deliveries are due at once."""
        ...

    @property
    def problem(self) -> str | None:
        """Why it cannot deliver, for ``/readyz`` (None: nothing to report)."""
        ...

    async def deliver(self, item: PendingDelivery) -> Outcome:
        """Send ``item`` once; never raises for network trouble."""
        ...

    def retry_delay(self, attempts: int, outcome: Outcome, rng: random.Random) -> float:
        """Seconds until the next attempt after ``attempts`` failed ones (>= 1)."""
        ...

    def count(self, kind: OutcomeKind) -> None:
        """Count one outcome in the target's metrics."""
        ...
