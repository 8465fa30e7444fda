"""Event delivery that loses nothing: the ``EventSink`` of the durable outbox.

:meth:`OutboxSink.publish` commits the event to the durable
:class:`~streamer.delivery.outbox.Outbox` (a pending delivery per target: every enabled
webhook target, and ``mqtt`` for the MQTT broker) and only then wakes the delivery workers;
it raises when the commit fails, so an event is never dropped silently.

One worker per target (:class:`~streamer.delivery.delivery_worker.DeliveryWorker`) takes
the oldest pending event of each camera from the outbox and hands it to the target's
:class:`~streamer.delivery.deliverer.Deliverer`: a signed POST
(streamer/delivery/webhook_delivery.py: 2xx is delivered; 408, 429, 5xx, a connection
error or a timeout is retried with backoff or after ``Retry-After``, with no limit on the
number of attempts; anything else is a dead letter, kept until re-driven with
``python -m streamer deadletters`` or :meth:`OutboxSink.redrive`), or QoS 1 publishes to the
broker (streamer/delivery/mqtt_delivery.py: delivered once the broker acknowledged them).
A housekeeping loop keeps the outbox gauges up to date and prunes delivered events after
``outbox.retention_s``.

The workers and the housekeeping loop run as parts of a
:class:`~streamer.pipeline.supervisor.Supervisor` (the service's, so that ``/readyz`` and
the ``lpr_part_*`` metrics show them; else one of the sink's own): ``webhook:<target>``,
``mqtt:delivery`` and ``outbox:housekeeping`` (and the deliverers' own: ``mqtt:connection``).
A part that crashes (a bug, an unexpected error of the outbox) is logged once with its
traceback and runs again after a capped backoff; the events it had to deliver stay pending
meanwhile.
:meth:`OutboxSink.close` stops them all. See docs/events.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from streamer.config import OutboxConfig, Settings
from streamer.delivery.deliverer import Deliverer
from streamer.delivery.delivery_worker import DeliveryWorker
from streamer.delivery.events import PlateEvent
from streamer.delivery.mqtt_delivery import MqttDeliverer
from streamer.delivery.outbox import Outbox, OutboxError
from streamer.delivery.outbox_sql import DeadLetter
from streamer.delivery.publisher import EventPublisher
from streamer.delivery.webhook_delivery import WebhookPoster
from streamer.domain.picture_links import PictureLinks
from streamer.ops.metrics import Metrics
from streamer.pipeline.shards import Shard
from streamer.pipeline.supervisor import PartState, Supervisor

LOG = logging.getLogger(__name__)

#: Seconds between two looks at the outbox when nothing wakes a worker (picks up
#: dead letters re-driven by the CLI, which runs in another process).
POLL_INTERVAL_S = 5.0
#: Seconds between two updates of the outbox depth / oldest-age gauges.
STATS_INTERVAL_S = 5.0
#: Seconds ``close()`` waits for deliveries in flight before cancelling them.
CLOSE_TIMEOUT_S = 5.0
#: Seconds a worker waits between tries while the outbox database is failing.
OUTBOX_ERROR_DELAY_S = 5.0
#: The supervised part of the housekeeping loop (a target's worker: its ``part``).
HOUSEKEEPING_PART = "outbox:housekeeping"


class OutboxSink:
    """The ``EventSink`` that delivers every event to every target, from the outbox.

    Make one with :func:`create_outbox_sink` or :meth:`open` (both start the workers);
    stop it with :meth:`close`.
    """

    name = "outbox"

    def __init__(
        self,
        outbox: Outbox,
        deliverers: Sequence[Deliverer],
        metrics: Metrics,
        *,
        retention_s: float,
        prune_interval_s: float,
        poll_interval_s: float = POLL_INTERVAL_S,
        close_timeout_s: float = CLOSE_TIMEOUT_S,
        outbox_error_delay_s: float = OUTBOX_ERROR_DELAY_S,
        rng: random.Random | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        """Use :meth:`open`; this does not start the workers. ``supervisor``: the one to
        run the workers under (the service's); None: the sink's own."""
        names = [d.name for d in deliverers]
        if not deliverers or set(names) != set(outbox.targets):
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
        self.deliverers = tuple(deliverers)
        #: target name -> its worker (made by _start).
        self._workers: dict[str, DeliveryWorker] = {}
        self._parts: list[str] = []
        self._closing: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        outbox_config: OutboxConfig,
        deliverers: Sequence[Deliverer],
        metrics: Metrics,
        **options: Any,
    ) -> OutboxSink:
        """Open the outbox and start a worker per target (``options``: see ``__init__``).

        Raises :class:`~streamer.delivery.outbox.OutboxError` when the outbox cannot
        be opened.
        """
        targets = [d.name for d in deliverers]
        outbox = await Outbox.open(outbox_config.path, targets, metrics=metrics)
        sink: OutboxSink | None = None
        try:
            sink = cls(
                outbox,
                deliverers,
                metrics,
                retention_s=outbox_config.retention_s,
                prune_interval_s=outbox_config.prune_interval_s,
                **options,
            )
            await sink._start()
        except BaseException:
            if sink is None:
                await outbox.close()
            else:  # what started stops again (parts, sessions), and the outbox closes
                await sink.close()
            raise
        return sink

    async def _start(self) -> None:
        for name, count in (await self.outbox.orphaned_targets()).items():
            LOG.warning(
                "outbox %s: %d undelivered event(s) for target %r, which is not configured "
                "(or disabled): they wait until it is again",
                self.outbox.path,
                count,
                name,
            )
        for deliverer in self.deliverers:
            worker = DeliveryWorker(
                deliverer,
                self.outbox,
                poll_interval_s=self.poll_interval_s,
                outbox_error_delay_s=self.outbox_error_delay_s,
                rng=self._rng,
            )
            self._workers[deliverer.name] = worker
            await deliverer.start(self.supervisor, worker.wake.set)
            self._parts.extend(deliverer.parts)
            self._supervise(deliverer.part, worker.run)
        self._supervise(HOUSEKEEPING_PART, self._run_housekeeping)

    def _supervise(self, part: str, run: Callable[[], Awaitable[None]]) -> None:
        self.supervisor.start(part, run)
        self._parts.append(part)

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.deliverers)

    def deliverer(self, target: str) -> Deliverer | None:
        return next((d for d in self.deliverers if d.name == target), None)

    @property
    def parts(self) -> dict[str, PartState]:
        """The sink's supervised parts (workers, housekeeping) and their states."""
        parts = self.supervisor.parts
        return {name: parts[name] for name in self._parts if name in parts}

    @property
    def healthy(self) -> bool:
        """The outbox writes, every part runs (none waits to restart) and no target reports
        a problem (for readiness)."""
        if not self.outbox.healthy or self._closing is not None or not self._workers:
            return False
        if self.problem is not None:
            return False
        parts = self.parts
        return len(parts) == len(self._parts) and all(p.state == "running" for p in parts.values())

    @property
    def problem(self) -> str | None:
        """What the targets report as wrong (a broker that refuses the credentials), for
        ``/readyz``; None when nothing."""
        problems = [p for d in self.deliverers if (p := d.problem) is not None]
        if not self.outbox.healthy and self.outbox.last_error:
            problems.insert(0, f"outbox: {self.outbox.last_error}")
        return "; ".join(problems) if problems else None

    async def forget(self, *, plate: str | None = None, event_id: str | None = None) -> int:
        """Clear what the MQTT broker retains of ``plate`` or the pass ``event_id`` (an
        erasure); how many retained messages."""
        count = 0
        for deliverer in self.deliverers:
            if isinstance(deliverer, MqttDeliverer):
                count += await deliverer.forget(plate=plate, event_id=event_id)
        return count

    async def cameras_changed(
        self, cameras: Sequence[str], configured: Sequence[str] | None = None
    ) -> None:
        """The running cameras after a reload (MQTT's discovery follows them); ``configured``:
        every camera of the config, some run by other replicas (default: ``cameras``)."""
        for deliverer in self.deliverers:
            if isinstance(deliverer, MqttDeliverer):
                await deliverer.set_cameras(cameras, configured)

    # ------------------------------------------------------------------ EventSink

    async def publish(self, event: PlateEvent) -> None:
        """Commit ``event`` to the outbox (durable when this returns), then wake the
        workers. Raises :class:`~streamer.delivery.outbox.OutboxError` when it
        cannot be stored."""
        if self._closing is not None:
            raise RuntimeError("the outbox sink is closed")
        await self.outbox.add(event)
        self._wake()

    def _wake(self) -> None:
        for worker in self._workers.values():
            worker.wake.set()

    async def close(self) -> None:
        """Stop the workers, give deliveries in flight ``close_timeout_s`` to finish (the rest
        stay pending and go after a restart), close the outbox. Idempotent."""
        if self._closing is None:
            self._closing = asyncio.create_task(self._close(), name="outbox-close")
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        # Each worker cancelled and awaited (a crashed one's exception went to its log); the
        # deliverers' own parts (the MQTT connection) stop after the deliveries in flight.
        own = {part for d in self.deliverers for part in d.parts}
        workers = [part for part in self._parts if part not in own]
        await asyncio.gather(*(self.supervisor.stop(part) for part in workers))
        in_flight = [task for w in self._workers.values() for task in w.in_flight.values()]
        if in_flight:
            _, late = await asyncio.wait(in_flight, timeout=self.close_timeout_s)
            if late:
                LOG.warning(
                    "outbox: %d deliveries still in flight after %.0f s: cancelled, they stay "
                    "pending in the outbox",
                    len(late),
                    self.close_timeout_s,
                )
            for task in late:
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)
        with contextlib.suppress(OutboxError):
            await self.refresh_metrics()
        for deliverer in self.deliverers:
            await deliverer.close()
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


def deliverers_of(
    settings: Settings,
    metrics: Metrics,
    *,
    links: PictureLinks | None = None,
    frames: bool = False,
    shard: Shard | None = None,
) -> list[Deliverer]:
    """A deliverer per enabled target of ``settings``, in the order of
    :attr:`~streamer.config.Settings.delivery_targets`. ``links`` signs the picture links of
    ``crop: url`` targets and MQTT (None: plain paths, which need the token); ``frames``: the
    history keeps vehicle pictures (a ``frame_url`` beside the crop's); ``shard``: the
    cameras this replica runs (default: all)."""
    deliverers: list[Deliverer] = []
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
        deliverers.append(
            MqttDeliverer(
                mqtt, metrics, held, links, frames=frames, configured=configured, replica=replica
            )
        )
    return deliverers


async def create_outbox_sink(
    settings: Settings,
    metrics: Metrics,
    *,
    links: PictureLinks | None = None,
    frames: bool = False,
    shard: Shard | None = None,
    **options: Any,
) -> OutboxSink | None:
    """The outbox sink of ``settings`` (started), or None when no target is enabled;
    ``links`` and ``frames``: see :func:`deliverers_of`; ``options``: see
    :class:`OutboxSink` (``supervisor=``: the service's).

    Raises :class:`~streamer.delivery.outbox.OutboxError` when the outbox cannot be
    opened (the service should not start: events would have nowhere durable to go).
    """
    deliverers = deliverers_of(settings, metrics, links=links, frames=frames, shard=shard)
    if not deliverers:
        return None
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
    return await OutboxSink.open(settings.outbox, deliverers, metrics, **options)


async def replace_outbox_sink(
    publisher: EventPublisher,
    old: OutboxSink | None,
    settings: Settings,
    running: Settings,
    metrics: Metrics,
    supervisor: Supervisor,
    **options: Any,
) -> OutboxSink | None:
    """A config reload's targets (webhooks, MQTT): ``old`` closed and a sink of ``settings``
    opened in its place among the publisher's sinks (its workers parts of ``supervisor``), no
    event given to a sink meanwhile; what the old workers had not delivered stays in the
    outbox for the new ones. A new sink that cannot open gives the ``running`` targets back
    (``options``: see :func:`create_outbox_sink`)."""

    async def open_new() -> OutboxSink | None:
        for part in old.parts if old is not None else ():  # a removed target's worker
            await supervisor.remove(part)
        try:
            return await create_outbox_sink(settings, metrics, supervisor=supervisor, **options)
        except OutboxError:  # logged by the outbox
            return await create_outbox_sink(running, metrics, supervisor=supervisor, **options)

    new = await publisher.replace_sink(old, open_new)
    return new if isinstance(new, OutboxSink) else None
