"""What the outbox's delivery workers deliver through: a :class:`Deliverer` per target.

A consumer of the event log (the history, stdout, a file, a webhook receiver, the MQTT
broker: a target of the outbox) is served by one
:class:`~streamer.delivery.delivery_worker.DeliveryWorker`, which takes the target's pending
events in per-camera order and hands each to the target's :class:`Deliverer`. The deliverer
sends it and says what that came to (:class:`Outcome`): delivered, retry (and when), or a
dead letter. It never raises for trouble on the network: only a bug does.

Deliverers: :class:`~streamer.delivery.webhook_delivery.WebhookPoster` (a signed POST),
:class:`~streamer.delivery.mqtt_delivery.MqttDeliverer` (QoS 1 publishes), and the consumers
in this process (each a :class:`LocalDeliverer`): the history
(streamer/store/history_delivery.py) and JSON lines to stdout or ``events.file``
(streamer/delivery/jsonl_delivery.py).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from streamer.delivery.outbox_sql import PendingDelivery
from streamer.foundation.backoff import backoff_delay
from streamer.foundation.metrics import Metrics
from streamer.foundation.supervisor import Supervisor

LOG = logging.getLogger(__name__)

#: Backoff of a consumer in this process (the history, a file) after a failed write...
LOCAL_RETRY_INITIAL_S = 0.5
#: ...capped at this: a history back from an outage is written again within it.
LOCAL_RETRY_MAX_S = 15.0
#: The longest one write of a consumer in this process may take before it counts as failed
#: (it goes on in its thread; the event is tried again, or found written, afterwards).
LOCAL_TIMEOUT_S = 10.0
#: Seconds ``close()`` waits for writes still running (a hung file system) before it leaves
#: them behind.
LOCAL_CLOSE_TIMEOUT_S = 2.0

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


class RefusedError(Exception):
    """A consumer in this process will never take this event (the history: a stale lease
    holder's event): a dead letter, not tried again."""


class LocalDeliverer:
    """A consumer in this process (the history, a JSON-lines file, stdout): :meth:`write`
    of a subclass does the work; this turns it into outcomes.

    A failed write is tried again with a capped backoff until it succeeds (what a history
    or a file that is back needs); only an event the consumer refuses for good
    (:class:`RefusedError`) becomes a dead letter. A write that does not return
    within ``timeout_s`` (a hung disk or database) counts as failed but goes on: the next
    attempt of that event waits for it (and is delivered if it succeeded), and no more than
    ``max_concurrency`` writes are ever running, so a hung one parks no more threads.
    """

    ready = True
    parts: tuple[str, ...] = ()
    with_crop = False
    with_frame = False

    def __init__(
        self,
        name: str,
        metrics: Metrics,
        *,
        max_concurrency: int = 1,
        timeout_s: float = LOCAL_TIMEOUT_S,
    ) -> None:
        self.name = name
        self.part = f"{name}:delivery"
        self.metrics = metrics
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        metrics.known(
            metrics.consumer_deliveries,
            *((name, kind) for kind in ("delivered", "retry", "dead")),
        )
        #: message id -> its write (running, or done and not yet looked at).
        self._writes: dict[str, asyncio.Future[None]] = {}
        self._problem: str | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def describe(self) -> str:
        return self.name

    async def start(self, supervisor: Supervisor, wake: Callable[[], None]) -> None:
        del supervisor, wake  # nothing long-lived

    async def close(self) -> None:
        """Wait a little for the writes still running; then leave them (a hung disk)."""
        running = [w for w in self._writes.values() if not w.done()]
        if running:
            _, late = await asyncio.wait(running, timeout=LOCAL_CLOSE_TIMEOUT_S)
            if late:
                LOG.warning("%s: %d write(s) still blocked at close: left", self.name, len(late))
        for write in self._writes.values():
            if write.done() and not write.cancelled():
                write.exception()  # looked at: no "never retrieved" warning
        self._writes.clear()

    @property
    def problem(self) -> str | None:
        """Why the last write failed, while writes fail."""
        return self._problem

    async def write(self, item: PendingDelivery) -> None:
        """Keep ``item`` (the subclass's work); raises when it could not."""
        raise NotImplementedError

    async def deliver(self, item: PendingDelivery) -> Outcome:
        key = item.event_id
        write = self._writes.get(key)
        if write is not None and write.done():
            del self._writes[key]
            if not write.cancelled() and write.exception() is None:
                return self._delivered()  # the write that timed out went through
            write = None
        if write is None:
            for done in [k for k, w in self._writes.items() if w.done()]:
                finished = self._writes.pop(done)
                if not finished.cancelled():
                    finished.exception()
            if len(self._writes) >= self.max_concurrency:
                return self._failed(
                    f"{len(self._writes)} earlier write(s) still running after "
                    f"{self.timeout_s:g} s (a hung disk or database?)"
                )
            write = asyncio.ensure_future(self.write(item))
            self._writes[key] = write
        try:
            async with asyncio.timeout(self.timeout_s):
                await asyncio.shield(write)
        except TimeoutError:
            return self._failed(f"no answer within {self.timeout_s:g} s")
        except RefusedError as exc:  # never to be taken
            self._writes.pop(key, None)
            return Outcome("dead", str(exc)[:500])
        except Exception as exc:  # the write failed: tried again
            self._writes.pop(key, None)
            return self._failed(f"{type(exc).__name__}: {exc}"[:300])
        self._writes.pop(key, None)
        return self._delivered()

    def _delivered(self) -> Outcome:
        self._problem = None
        return Outcome("delivered")

    def _failed(self, error: str) -> Outcome:
        self._problem = error
        return Outcome("retry", error)

    def retry_delay(self, attempts: int, outcome: Outcome, rng: random.Random) -> float:
        del outcome
        return backoff_delay(attempts, LOCAL_RETRY_INITIAL_S, LOCAL_RETRY_MAX_S, rng)

    def count(self, kind: OutcomeKind) -> None:
        self.metrics.consumer_deliveries.labels(self.name, kind).inc()
