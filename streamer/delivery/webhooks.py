"""Webhook delivery: an ``EventSink`` that loses nothing.

:meth:`WebhookSink.publish` commits the event to the durable
:class:`~streamer.delivery.outbox.Outbox`
(a pending delivery per target) and only then wakes the delivery workers; it raises
when the commit fails, so an event is never dropped silently.

One worker per target (:class:`~streamer.delivery.webhook_worker.TargetWorker`) takes
the oldest pending event of each camera from the outbox and POSTs it, signed
(streamer/delivery/webhook_delivery.py): 2xx is delivered; 408, 429, 5xx, a
connection error or a timeout is retried with backoff or after ``Retry-After``
(streamer/delivery/retry.py), with no limit on the number of attempts; anything else
is a dead letter, kept until re-driven (``python -m streamer deadletters``,
:meth:`WebhookSink.redrive`). A housekeeping loop keeps the outbox gauges up to date
and prunes delivered events after ``outbox.retention_s``.

The workers and the housekeeping loop run as parts of a
:class:`~streamer.pipeline.supervisor.Supervisor` (the service's, so that ``/readyz``
and the ``lpr_part_*`` metrics show them; else one of the sink's own): ``webhook:<target>``
and ``webhooks:housekeeping``. A part that crashes (a bug, an unexpected error of the
outbox) is logged once with its traceback and runs again after a capped backoff; the
events it had to deliver stay pending meanwhile. :meth:`WebhookSink.close` stops them all.
See docs/events.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import aiohttp

from streamer.config import OutboxConfig, Settings, WebhookTargetConfig
from streamer.delivery.events import PlateEvent
from streamer.delivery.outbox import Outbox, OutboxError
from streamer.delivery.outbox_sql import DeadLetter
from streamer.delivery.publisher import EventPublisher
from streamer.delivery.webhook_delivery import USER_AGENT, WebhookPoster
from streamer.delivery.webhook_worker import TargetWorker
from streamer.domain.picture_links import PictureLinks
from streamer.ops.metrics import Metrics
from streamer.pipeline.supervisor import PartState, Supervisor

LOG = logging.getLogger(__name__)

#: Seconds between two looks at the outbox when nothing wakes a worker (picks up
#: dead letters re-driven by the CLI, which runs in another process).
POLL_INTERVAL_S = 5.0
#: Seconds between two updates of the outbox depth / oldest-age gauges.
STATS_INTERVAL_S = 5.0
#: Seconds ``close()`` waits for POSTs in flight before cancelling them.
CLOSE_TIMEOUT_S = 5.0
#: Seconds a worker waits between tries while the outbox database is failing.
OUTBOX_ERROR_DELAY_S = 5.0
#: The supervised part of the housekeeping loop (a target's worker: :func:`worker_part`).
HOUSEKEEPING_PART = "webhooks:housekeeping"


def worker_part(target: str) -> str:
    """The supervised part that runs the worker of ``target``."""
    return f"webhook:{target}"


class WebhookSink:
    """The ``EventSink`` that POSTs every event to every webhook target, from the outbox.

    Make one with :func:`create_webhook_sink` or :meth:`open` (both start the workers);
    stop it with :meth:`close`.
    """

    name = "webhooks"

    def __init__(
        self,
        outbox: Outbox,
        targets: Sequence[WebhookTargetConfig],
        metrics: Metrics,
        *,
        retention_s: float,
        prune_interval_s: float,
        poll_interval_s: float = POLL_INTERVAL_S,
        close_timeout_s: float = CLOSE_TIMEOUT_S,
        outbox_error_delay_s: float = OUTBOX_ERROR_DELAY_S,
        rng: random.Random | None = None,
        supervisor: Supervisor | None = None,
        links: PictureLinks | None = None,
        frames: bool = False,
    ) -> None:
        """Use :meth:`open`; this does not start the workers. ``supervisor``: the one to
        run the workers under (the service's); None: the sink's own. ``links``: signs the
        picture links of ``crop: url`` targets (None: plain paths, which need the token);
        ``frames``: the history keeps vehicle pictures (a ``frame_url`` beside the crop's)."""
        names = [t.name for t in targets]
        if not targets or set(names) != set(outbox.targets):
            raise ValueError(f"targets {names} do not match the outbox's {list(outbox.targets)}")
        self.outbox = outbox
        self.metrics = metrics
        self.retention_s = retention_s
        self.prune_interval_s = prune_interval_s
        self.poll_interval_s = poll_interval_s
        self.close_timeout_s = close_timeout_s
        self.outbox_error_delay_s = outbox_error_delay_s
        self.supervisor = supervisor if supervisor is not None else Supervisor()
        self._rng = rng or random.Random()
        self._links = links
        self._frames = frames
        self._configs = tuple(targets)
        #: target name -> its worker (made by _start, with the HTTP session).
        self._workers: dict[str, TargetWorker] = {}
        self._session: aiohttp.ClientSession | None = None
        self._parts: list[str] = []
        self._closing: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        outbox_config: OutboxConfig,
        targets: Sequence[WebhookTargetConfig],
        metrics: Metrics,
        **options: Any,
    ) -> WebhookSink:
        """Open the outbox and start a worker per target (``options``: see ``__init__``).

        Raises :class:`~streamer.delivery.outbox.OutboxError` when the outbox cannot
        be opened.
        """
        outbox = await Outbox.open(outbox_config.path, [t.name for t in targets], metrics=metrics)
        sink: WebhookSink | None = None
        try:
            sink = cls(
                outbox,
                targets,
                metrics,
                retention_s=outbox_config.retention_s,
                prune_interval_s=outbox_config.prune_interval_s,
                **options,
            )
            await sink._start()
        except BaseException:
            if sink is None:
                await outbox.close()
            else:  # what started stops again (parts, session), and the outbox closes
                await sink.close()
            raise
        return sink

    async def _start(self) -> None:
        for name, count in (await self.outbox.orphaned_targets()).items():
            LOG.warning(
                "outbox %s: %d undelivered event(s) for webhook target %r, which is not "
                "configured (or disabled): they wait until it is again",
                self.outbox.path,
                count,
                name,
            )
        limit = sum(t.max_concurrency for t in self._configs)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit),
            headers={"user-agent": USER_AGENT},
        )
        for config in self._configs:
            worker = TargetWorker(
                WebhookPoster(config, self._links, frames=self._frames),
                self.outbox,
                self.metrics,
                self._session,
                poll_interval_s=self.poll_interval_s,
                outbox_error_delay_s=self.outbox_error_delay_s,
                rng=self._rng,
            )
            self._workers[config.name] = worker
            self._supervise(worker_part(config.name), worker.run)
            LOG.info(
                "webhook %s: delivering to %s (crop: %s, up to %d in flight)",
                config.name,
                config.redacted_url,
                config.crop,
                config.max_concurrency,
            )
        self._supervise(HOUSEKEEPING_PART, self._run_housekeeping)

    def _supervise(self, part: str, run: Callable[[], Awaitable[None]]) -> None:
        self.supervisor.start(part, run)
        self._parts.append(part)

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(t.name for t in self._configs)

    @property
    def parts(self) -> dict[str, PartState]:
        """The sink's supervised parts (workers, housekeeping) and their states."""
        parts = self.supervisor.parts
        return {name: parts[name] for name in self._parts if name in parts}

    @property
    def healthy(self) -> bool:
        """The outbox writes and every part runs, none waits to restart (for readiness)."""
        if not self.outbox.healthy or self._closing is not None or not self._workers:
            return False
        parts = self.parts
        return len(parts) == len(self._parts) and all(p.state == "running" for p in parts.values())

    # ------------------------------------------------------------------ EventSink

    async def publish(self, event: PlateEvent) -> None:
        """Commit ``event`` to the outbox (durable when this returns), then wake the
        workers. Raises :class:`~streamer.delivery.outbox.OutboxError` when it
        cannot be stored."""
        if self._closing is not None:
            raise RuntimeError("the webhook sink is closed")
        await self.outbox.add(event)
        self._wake()

    def _wake(self) -> None:
        for worker in self._workers.values():
            worker.wake.set()

    async def close(self) -> None:
        """Stop the workers, give POSTs in flight ``close_timeout_s`` to finish (the rest
        stay pending and go after a restart), close the outbox. Idempotent."""
        if self._closing is None:
            self._closing = asyncio.create_task(self._close(), name="webhook-close")
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        # Each part cancelled and awaited (a crashed one's exception went to its log).
        await asyncio.gather(*(self.supervisor.stop(part) for part in self._parts))
        in_flight = [task for w in self._workers.values() for task in w.in_flight.values()]
        if in_flight:
            _, late = await asyncio.wait(in_flight, timeout=self.close_timeout_s)
            if late:
                LOG.warning(
                    "webhooks: %d POST(s) still in flight after %.0f s: cancelled, they stay "
                    "pending in the outbox",
                    len(late),
                    self.close_timeout_s,
                )
            for task in late:
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)
        with contextlib.suppress(OutboxError):
            await self.refresh_metrics()
        if self._session is not None:
            await self._session.close()
        await self.outbox.close()

    # ------------------------------------------------------------------ dead letters

    async def dead_letters(self, target: str | None = None) -> list[DeadLetter]:
        return await self.outbox.dead_letters(target)

    async def redrive(
        self, event_ids: Iterable[str] | None = None, target: str | None = None
    ) -> int:
        """Dead letters back to pending (None: all), delivered at once; returns the count."""
        count = await self.outbox.redrive(event_ids, target)
        self._wake()
        return count

    # ------------------------------------------------------------------ metrics

    async def refresh_metrics(self) -> None:
        """Set the outbox depth and oldest-age gauges of every target."""
        for name in self.targets:
            stats = await self.outbox.stats(name)
            self.metrics.outbox_depth.labels(name).set(stats.depth)
            self.metrics.outbox_oldest_age.labels(name).set(stats.oldest_age_s)

    async def _run_housekeeping(self) -> None:
        next_prune = time.monotonic()
        while True:
            with contextlib.suppress(OutboxError):  # logged and counted by the outbox
                await self.refresh_metrics()
            if time.monotonic() >= next_prune:
                next_prune = time.monotonic() + self.prune_interval_s
                with contextlib.suppress(OutboxError):
                    pruned = await self.outbox.prune(self.retention_s)
                    if pruned:
                        LOG.info("outbox: pruned %d delivered event(s)", pruned)
            await asyncio.sleep(max(0.0, min(STATS_INTERVAL_S, next_prune - time.monotonic())))


async def create_webhook_sink(
    settings: Settings, metrics: Metrics, **options: Any
) -> WebhookSink | None:
    """The webhook sink of ``settings`` (started), or None when no target is enabled;
    ``options``: see :class:`WebhookSink` (``supervisor=``: the service's).

    Raises :class:`~streamer.delivery.outbox.OutboxError` when the outbox cannot be
    opened (the service should not start: events would have nowhere durable to go).
    """
    targets = [t for t in settings.webhooks if t.enabled]
    if not targets:
        return None
    return await WebhookSink.open(settings.outbox, targets, metrics, **options)


async def replace_webhook_sink(
    publisher: EventPublisher,
    old: WebhookSink | None,
    settings: Settings,
    running: Settings,
    metrics: Metrics,
    supervisor: Supervisor,
    **options: Any,
) -> WebhookSink | None:
    """A config reload's webhook targets: ``old`` closed and a sink of ``settings`` opened in
    its place among the publisher's sinks (its workers parts of ``supervisor``), no event
    given to a sink meanwhile; what the old workers had not delivered stays in the outbox for
    the new ones. A new sink that cannot open gives the ``running`` targets back
    (``options``: see :class:`WebhookSink`)."""

    async def open_new() -> WebhookSink | None:
        for part in old.parts if old is not None else ():  # a removed target's worker
            await supervisor.remove(part)
        try:
            return await create_webhook_sink(settings, metrics, supervisor=supervisor, **options)
        except OutboxError:  # logged by the outbox
            return await create_webhook_sink(running, metrics, supervisor=supervisor, **options)

    new = await publisher.replace_sink(old, open_new)
    return new if isinstance(new, WebhookSink) else None
