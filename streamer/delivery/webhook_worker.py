"""One webhook target's worker: its pending events from the outbox, POSTed in order.

:meth:`TargetWorker.run` takes the oldest pending event of each camera from the outbox and
POSTs it (:class:`~streamer.delivery.webhook_delivery.WebhookPoster`): a camera's events
go one at a time and in order, cameras in parallel up to ``max_concurrency``. Each target
has its own worker and progress, so a target that is down holds up no other. What each
answer comes to is recorded in the outbox (delivered, retry at a time from
:mod:`streamer.delivery.retry`, dead letter) and counted.

The worker sleeps until woken (a new event, a POST done, a re-drive) or ``poll_interval_s``
(dead letters re-driven by the CLI, in another process) or the next retry is due. An
:class:`~streamer.delivery.outbox.OutboxError` (logged and counted by the outbox)
slows it down to ``outbox_error_delay_s``; any other exception ends :meth:`run`, for its
supervisor to log with the traceback and run again (the sink,
:class:`~streamer.delivery.webhooks.WebhookSink`, runs it as a part). The POSTs in
flight are tasks of their own: they outlive a crash of the loop, and a restarted loop
does not send their cameras' events again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time

import aiohttp

from streamer.delivery.outbox import Outbox, OutboxError
from streamer.delivery.outbox_sql import PendingDelivery
from streamer.delivery.retry import retry_delay
from streamer.delivery.webhook_delivery import Outcome, WebhookPoster
from streamer.ops.metrics import Metrics

LOG = logging.getLogger(__name__)


class TargetWorker:
    """A target's worker and its state (see the module docstring)."""

    def __init__(
        self,
        poster: WebhookPoster,
        outbox: Outbox,
        metrics: Metrics,
        session: aiohttp.ClientSession,
        *,
        poll_interval_s: float,
        outbox_error_delay_s: float,
        rng: random.Random,
    ) -> None:
        self.config = poster.config
        self.name = poster.config.name
        self.poster = poster
        self.outbox = outbox
        self.metrics = metrics
        self.poll_interval_s = poll_interval_s
        self.outbox_error_delay_s = outbox_error_delay_s
        self._session = session
        self._rng = rng
        self.wake = asyncio.Event()
        #: camera -> its POST in flight (one per camera: per-camera order).
        self.in_flight: dict[str, asyncio.Task[None]] = {}
        self.failing = False

    def __repr__(self) -> str:
        return f"TargetWorker({self.name!r})"

    async def run(self) -> None:
        """Keep up to ``max_concurrency`` cameras' heads in flight, until cancelled."""
        config = self.config
        while True:
            self.wake.clear()
            if not self.outbox.healthy:
                # The database fails: go slowly, so that a full disk does not turn into
                # a storm of POSTs whose success cannot be recorded.
                await asyncio.sleep(self.outbox_error_delay_s)
            timeout = self.poll_interval_s
            try:
                free = config.max_concurrency - len(self.in_flight)
                if free > 0:
                    batch = await self.outbox.next_batch(
                        self.name,
                        free,
                        exclude_cameras=set(self.in_flight),
                        with_crop=config.crop == "base64",
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
        task = asyncio.create_task(self._deliver(item), name=f"webhook-{self.name}-{item.camera}")
        self.in_flight[item.camera] = task
        task.add_done_callback(functools.partial(self._delivered, item.camera))

    def _delivered(self, camera: str, task: asyncio.Task[None]) -> None:
        if self.in_flight.get(camera) is task:
            del self.in_flight[camera]
        self.wake.set()

    async def _deliver(self, item: PendingDelivery) -> None:
        try:
            outcome = await self.poster.post(self._session, item)
            await self._record(item, outcome)
        except OutboxError:
            pass  # logged and counted; the delivery stays pending and is sent again
        except Exception:
            LOG.exception("webhook %s: delivering event %s failed", self.name, item.event_id)

    async def _record(self, item: PendingDelivery, outcome: Outcome) -> None:
        name = self.name
        if outcome.kind == "delivered":
            self.metrics.webhook_deliveries.labels(name, "delivered").inc()
            await self.outbox.mark_delivered(item.event_id, name)
            if self.failing:
                self.failing = False
                LOG.info("webhook %s: delivering again", name)
            LOG.info("webhook %s: delivered event %s", name, item.event_id)
            return
        error = outcome.error or "unknown error"
        if outcome.kind == "dead":
            self.metrics.webhook_deliveries.labels(name, "dead_letter").inc()
            self.metrics.webhook_dead_letters.labels(name).inc()
            await self.outbox.mark_dead(item.event_id, name, error)
            LOG.warning(
                "webhook %s: event %s (camera %s) is a dead letter: %s (see "
                "`python -m streamer deadletters list`)",
                name,
                item.event_id,
                item.camera,
                error,
            )
            return
        attempts = item.attempts + 1
        delay = retry_delay(self.config, attempts, outcome.retry_after_s, self._rng)
        self.metrics.webhook_deliveries.labels(name, "retry").inc()
        self.metrics.webhook_retries.labels(name).inc()
        await self.outbox.mark_retry(item.event_id, name, time.time() + delay, error)
        if not self.failing:
            self.failing = True
            LOG.warning("webhook %s: delivery failed (%s); retrying with backoff", name, error)
        LOG.debug(
            "webhook %s: event %s attempt %d failed (%s); next in %.1f s",
            name,
            item.event_id,
            attempts,
            error,
            delay,
        )
