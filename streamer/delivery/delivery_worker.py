"""One outbox target's worker: its pending events from the outbox, delivered in order.

:meth:`DeliveryWorker.run` takes the oldest pending event of each camera from the outbox and
hands it to the target's :class:`~streamer.delivery.deliverer.Deliverer` (a webhook POST, an
MQTT publish): a camera's events go one at a time and in order, cameras in parallel up to
``max_concurrency``. Each target has its own worker and progress, so a target that is down
holds up no other. What each attempt comes to is recorded in the outbox (delivered, retry at
the deliverer's time, dead letter) and counted.

While the deliverer is not :attr:`~streamer.delivery.deliverer.Deliverer.ready` (the MQTT
broker is unreachable) nothing is sent; when it turns ready, the target's pending deliveries
are made due at once, so a backlog goes out without waiting out its backoff.

The worker sleeps until woken (a new event, a delivery done, a re-drive, the deliverer ready
again) or ``poll_interval_s`` (dead letters re-driven by the CLI, in another process) or the
next retry is due. An :class:`~streamer.delivery.outbox.OutboxError` (logged and counted by
the outbox) slows it down to ``outbox_error_delay_s``; any other exception ends :meth:`run`,
for its supervisor to log with the traceback and run again (the sink,
:class:`~streamer.delivery.consumers.Consumers`, runs it as a part). The deliveries in
flight are tasks of their own: they outlive a crash of the loop, and a restarted loop does
not send their cameras' events again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time

from streamer.delivery.deliverer import Deliverer, LocalDeliverer, Outcome
from streamer.delivery.outbox import Outbox, OutboxError
from streamer.delivery.outbox_sql import PendingDelivery

LOG = logging.getLogger(__name__)


class DeliveryWorker:
    """A target's worker and its state (see the module docstring)."""

    def __init__(
        self,
        deliverer: Deliverer,
        outbox: Outbox,
        *,
        poll_interval_s: float,
        outbox_error_delay_s: float,
        rng: random.Random,
    ) -> None:
        self.deliverer = deliverer
        self.name = deliverer.name
        self.outbox = outbox
        self.poll_interval_s = poll_interval_s
        self.outbox_error_delay_s = outbox_error_delay_s
        self._rng = rng
        self.wake = asyncio.Event()
        #: camera -> its delivery in flight (one per camera: per-camera order).
        self.in_flight: dict[str, asyncio.Task[None]] = {}
        self.failing = False
        #: Events delivered and dead-lettered by this worker (a ``--once`` run's summary).
        self.delivered = 0
        self.dead = 0
        #: The deliverer was ready at the last look (a change to ready makes all due).
        self._was_ready = True

    def __repr__(self) -> str:
        return f"DeliveryWorker({self.name!r})"

    async def run(self) -> None:
        """Keep up to ``max_concurrency`` cameras' heads in flight, until cancelled."""
        deliverer = self.deliverer
        while True:
            self.wake.clear()
            if not self.outbox.healthy:
                # The database fails: go slowly, so that a full disk does not turn into
                # a storm of deliveries whose success cannot be recorded.
                await asyncio.sleep(self.outbox_error_delay_s)
            timeout = self.poll_interval_s
            try:
                ready = deliverer.ready
                if ready and not self._was_ready:
                    await self.outbox.due_now(self.name)
                self._was_ready = ready
                free = deliverer.max_concurrency - len(self.in_flight)
                if ready and free > 0:
                    batch = await self.outbox.next_batch(
                        self.name,
                        free,
                        exclude_cameras=set(self.in_flight),
                        with_crop=deliverer.with_crop,
                        with_frame=getattr(deliverer, "with_frame", False),
                    )
                    for item in batch:
                        self._launch(item)
                    due = await self.outbox.next_due(self.name, exclude_cameras=set(self.in_flight))
                    if due is not None:
                        timeout = min(timeout, max(0.0, due - time.time()))
            except OutboxError:  # logged and counted by the outbox
                timeout = self.outbox_error_delay_s
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
            # cancel that lands as the wake-up fires, and close() would wait forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self.wake.wait()

    def _launch(self, item: PendingDelivery) -> None:
        task = asyncio.create_task(self._deliver(item), name=f"deliver-{self.name}-{item.camera}")
        self.in_flight[item.camera] = task
        task.add_done_callback(functools.partial(self._delivered, item.camera))

    def _delivered(self, camera: str, task: asyncio.Task[None]) -> None:
        if self.in_flight.get(camera) is task:
            del self.in_flight[camera]
        self.wake.set()

    async def _deliver(self, item: PendingDelivery) -> None:
        try:
            outcome = await self.deliverer.deliver(item)
            await self._record(item, outcome)
        except OutboxError:
            pass  # logged and counted; the delivery stays pending and is sent again
        except Exception:
            LOG.exception(
                "%s: delivering event %s failed", self.deliverer.describe(), item.event_id
            )

    async def _record(self, item: PendingDelivery, outcome: Outcome) -> None:
        name, what = self.name, self.deliverer.describe()
        self.deliverer.count(outcome.kind)
        if outcome.kind == "delivered":
            await self.outbox.mark_delivered(item.event_id, name)
            self.delivered += 1
            if self.failing:
                self.failing = False
                LOG.info("%s: delivering again", what)
            # The remote ones at INFO (what left the process); history and files every event.
            local = isinstance(self.deliverer, LocalDeliverer)
            LOG.log(
                logging.DEBUG if local else logging.INFO,
                "%s: delivered event %s",
                what,
                item.event_id,
            )
            return
        error = outcome.error or "unknown error"
        if outcome.kind == "dead":
            await self.outbox.mark_dead(item.event_id, name, error)
            self.dead += 1
            LOG.warning(
                "%s: event %s (camera %s) is a dead letter: %s (see "
                "`python -m streamer deadletters list`)",
                what,
                item.event_id,
                item.camera,
                error,
            )
            return
        attempts = item.attempts + 1
        delay = self.deliverer.retry_delay(attempts, outcome, self._rng)
        await self.outbox.mark_retry(item.event_id, name, time.time() + delay, error)
        if not self.failing:
            self.failing = True
            LOG.warning("%s: delivery failed (%s); retrying with backoff", what, error)
        LOG.debug(
            "%s: event %s attempt %d failed (%s); next in %.1f s",
            what,
            item.event_id,
            attempts,
            error,
            delay,
        )
