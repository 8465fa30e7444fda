"""The consumers of the event log: each reads the durable outbox at its own pace.

A decided event is committed to the log first (streamer/delivery/publisher.py: it commits
through :meth:`Consumers.append`, which gives the event a pending delivery per consumer);
then every consumer takes it from there: the history (streamer/store/history_delivery.py),
``events.stdout`` and ``events.file`` (streamer/delivery/jsonl_delivery.py), each webhook
target (streamer/delivery/webhook_delivery.py) and the MQTT broker
(streamer/delivery/mqtt_delivery.py). Each consumer has its own position (its pending
deliveries, oldest first per camera) and its own worker
(:class:`~streamer.delivery.delivery_worker.DeliveryWorker`): one that is slow, failing or
hung delays only itself. Its lag, in events and in seconds, is ``lpr_outbox_depth`` and
``lpr_outbox_oldest_undelivered_age_seconds``; past ``outbox.max_lag_s`` it is a readiness
problem naming it.

A housekeeping loop (``outbox:housekeeping``) keeps those gauges up to date, prunes delivered
events after ``outbox.retention_s`` and dead letters after ``outbox.dead_letter_retention_s``,
warns when a consumer's backlog nears ``outbox.max_pending`` and, beyond it, turns its oldest
pending events into dead letters (re-drivable, never deleted unseen).

The workers and the housekeeping loop run as parts of a
:class:`~streamer.foundation.supervisor.Supervisor` (the service's, so that ``/readyz`` and
the ``lpr_part_*`` metrics show them; else one of the set's own): ``history:delivery``,
``stdout:delivery``, ``file:delivery``, ``webhook:<target>``, ``mqtt:delivery`` and
``outbox:housekeeping`` (and the deliverers' own: ``mqtt:connection``). A part that crashes
is logged once with its traceback and runs again after a capped backoff; its events stay
pending meanwhile.

A reload (:meth:`Consumers.replace`) keeps the consumers whose config did not change as
they run, opens the new ones, and only then stops the removed ones; the swap runs to its
end even when the reload is cancelled (SIGTERM), so no closed consumer is ever left in
place. See docs/events.md, "The event log".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamer.config import OutboxConfig
from streamer.delivery.backlogs import STATS_INTERVAL_S, Backlogs
from streamer.delivery.consumer_config import opens_alone, same_consumer
from streamer.delivery.deliverer import Deliverer, LocalDeliverer
from streamer.delivery.delivery_worker import DeliveryWorker
from streamer.delivery.events import PlateEvent
from streamer.delivery.mqtt_delivery import MqttDeliverer
from streamer.delivery.outbox import Outbox, OutboxError
from streamer.delivery.outbox_sql import DeadLetter
from streamer.foundation.metrics import Metrics
from streamer.foundation.supervisor import PartState, Supervisor

LOG = logging.getLogger(__name__)

#: Seconds between two looks at the outbox when nothing wakes a worker (picks up
#: dead letters re-driven by the CLI, which runs in another process).
POLL_INTERVAL_S = 5.0
#: Seconds ``close()`` waits for deliveries in flight before cancelling them.
CLOSE_TIMEOUT_S = 5.0
#: Seconds a worker waits between tries while the outbox database is failing.
OUTBOX_ERROR_DELAY_S = 5.0
#: The supervised part of the housekeeping loop (a target's worker: its ``part``).
HOUSEKEEPING_PART = "outbox:housekeeping"
#: Seconds between two looks at the backlog while waiting for the consumers (``--once``).
CATCH_UP_POLL_S = 0.2
#: With ``run --once``, how long the consumers may take to catch up with the log at the end
#: (``--drain-timeout``); what is left then goes at the next start.
CATCH_UP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Progress:
    """What a consumer did in this run, and what it has left (``--once``'s summary)."""

    delivered: int
    dead: int
    pending: int


class Consumers:
    """The consumers of one event log (see the module docstring).

    Make one with :meth:`open` (its own outbox, for tools and tests) or give it the
    service's outbox, then :meth:`start` it; stop it with :meth:`close`.
    """

    name = "outbox"

    def __init__(
        self,
        outbox: Outbox,
        deliverers: Sequence[Deliverer],
        metrics: Metrics,
        config: OutboxConfig,
        *,
        poll_interval_s: float = POLL_INTERVAL_S,
        close_timeout_s: float = CLOSE_TIMEOUT_S,
        outbox_error_delay_s: float = OUTBOX_ERROR_DELAY_S,
        stats_interval_s: float = STATS_INTERVAL_S,
        rng: random.Random | None = None,
        supervisor: Supervisor | None = None,
        owns_outbox: bool = False,
    ) -> None:
        """Use :meth:`open`, or :meth:`start` after this. ``supervisor``: the one to run
        the workers under (the service's); None: the set's own. ``owns_outbox``: close the
        outbox with the consumers."""
        names = [d.name for d in deliverers]
        if not deliverers or len(set(names)) != len(names):
            raise ValueError(f"consumers must be at least one, with unique names: {names}")
        self.outbox = outbox
        self.metrics = metrics
        self.config = config
        self.poll_interval_s = poll_interval_s
        self.close_timeout_s = close_timeout_s
        self.outbox_error_delay_s = outbox_error_delay_s
        self.supervisor = supervisor if supervisor is not None else Supervisor()
        self.owns_outbox = owns_outbox
        self._rng = rng or random.Random()
        self.deliverers: tuple[Deliverer, ...] = tuple(deliverers)
        #: consumer name -> its worker.
        self._workers: dict[str, DeliveryWorker] = {}
        #: consumer name -> the parts it runs (its worker's, its deliverer's own).
        self._parts: dict[str, list[str]] = {}
        #: Each consumer's backlog, looked after (the housekeeping part).
        self.backlogs = Backlogs(outbox, config, metrics, stats_interval_s=stats_interval_s)
        self._closing: asyncio.Task[None] | None = None
        self._swap: asyncio.Lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        config: OutboxConfig,
        deliverers: Sequence[Deliverer],
        metrics: Metrics,
        **options: Any,
    ) -> Consumers:
        """Open the outbox of ``config`` (as its owner) and start a worker per consumer
        (``options``: see ``__init__``); closing the set closes that outbox.

        Raises :class:`~streamer.delivery.outbox.OutboxError` when the outbox cannot
        be opened.
        """
        if not deliverers:
            raise ValueError("consumers must be at least one: nothing would read the log")
        outbox = await Outbox.open(
            config.path, [d.name for d in deliverers], metrics=metrics, owner=True
        )
        consumers: Consumers | None = None
        try:
            consumers = cls(outbox, deliverers, metrics, config, owns_outbox=True, **options)
            await consumers.start()
        except BaseException:
            if consumers is None:
                await outbox.close()
            else:  # what started stops again (parts, sessions), and the outbox closes
                await consumers.close()
            raise
        return consumers

    async def start(self) -> None:
        """Start a worker per consumer and the housekeeping loop; new events get a pending
        delivery for each consumer from now on."""
        self._set_targets(self.deliverers)
        for name, count in (await self.outbox.orphaned_targets()).items():
            LOG.warning(
                "outbox %s: %d undelivered event(s) for consumer %r, which is not configured "
                "(or disabled): they wait until it is again",
                self.outbox.path,
                count,
                name,
            )
        for deliverer in self.deliverers:
            await self._start_one(deliverer)
        self._supervise(HOUSEKEEPING_PART, HOUSEKEEPING_PART, self._run_housekeeping)

    async def _start_one(self, deliverer: Deliverer) -> None:
        if isinstance(deliverer, MqttDeliverer):
            deliverer.erased_passes |= await self.outbox.erased()
        worker = DeliveryWorker(
            deliverer,
            self.outbox,
            poll_interval_s=self.poll_interval_s,
            outbox_error_delay_s=self.outbox_error_delay_s,
            rng=self._rng,
        )
        self._workers[deliverer.name] = worker
        self._parts[deliverer.name] = []
        await deliverer.start(self.supervisor, worker.wake.set)
        self._parts[deliverer.name].extend(deliverer.parts)
        self._supervise(deliverer.name, deliverer.part, worker.run)

    def _supervise(self, owner: str, part: str, run: Callable[[], Awaitable[None]]) -> None:
        self.supervisor.start(part, run)
        self._parts.setdefault(owner, []).append(part)

    async def _stop_one(self, name: str) -> None:
        """Stop a consumer's worker, give its deliveries in flight ``close_timeout_s`` (the
        rest stay pending), close its deliverer and forget its parts."""
        worker = self._workers.pop(name, None)
        deliverer = next((d for d in self.deliverers if d.name == name), None)
        if worker is not None and deliverer is not None:
            await self.supervisor.remove(deliverer.part)
            in_flight = list(worker.in_flight.values())
            if in_flight:
                _, late = await asyncio.wait(in_flight, timeout=self.close_timeout_s)
                if late:
                    LOG.warning(
                        "%s: %d deliveries still in flight after %.0f s: cancelled, they stay "
                        "pending in the outbox",
                        deliverer.describe(),
                        len(late),
                        self.close_timeout_s,
                    )
                for task in late:
                    task.cancel()
                await asyncio.gather(*in_flight, return_exceptions=True)
        if deliverer is not None:
            await deliverer.close()
        for part in self._parts.pop(name, ()):
            await self.supervisor.remove(part)

    def _set_targets(self, deliverers: Sequence[Deliverer]) -> None:
        """The consumers new events get a delivery for, those that take the picture and
        those that take withheld passes."""
        self.outbox.targets = tuple(d.name for d in deliverers)
        self.outbox.frame_targets = tuple(
            d.name for d in deliverers if getattr(d, "with_frame", False)
        )
        self.outbox.withheld_targets = tuple(
            d.name for d in deliverers if getattr(d, "takes_withheld", False)
        )

    @property
    def targets(self) -> tuple[str, ...]:
        """The consumers' names (the outbox's targets)."""
        return tuple(d.name for d in self.deliverers)

    def deliverer(self, target: str) -> Deliverer | None:
        return next((d for d in self.deliverers if d.name == target), None)

    def worker(self, target: str) -> DeliveryWorker | None:
        return self._workers.get(target)

    @property
    def parts(self) -> dict[str, PartState]:
        """The set's supervised parts (workers, housekeeping) and their states."""
        parts = self.supervisor.parts
        names = [part for owned in self._parts.values() for part in owned]
        return {name: parts[name] for name in names if name in parts}

    @property
    def healthy(self) -> bool:
        """The outbox writes, every part runs and no consumer reports a problem (readiness)."""
        if not self.outbox.healthy or self._closing is not None or not self._workers:
            return False
        if self.problem is not None:
            return False
        expected = sum(len(owned) for owned in self._parts.values())
        parts = self.parts
        return len(parts) == expected and all(p.state == "running" for p in parts.values())

    @property
    def problem(self) -> str | None:
        """What is wrong, for ``/readyz``: the outbox failing, a consumer that reports a
        problem (a broker that refuses the credentials, a receiver that rejects), one that
        lags past ``outbox.max_lag_s``, a backlog near ``outbox.max_pending``; None: nothing."""
        problems = []
        if not self.outbox.healthy and self.outbox.last_error:
            problems.append(f"outbox: {self.outbox.last_error}")
        for deliverer in self.deliverers:
            lag = self.lag_problem(deliverer.name)
            if lag is not None:
                problems.append(lag)
            # A consumer in this process that fails is a problem once it lags; a remote one
            # that says why it cannot deliver (refused credentials, rejected) is one at once.
            if deliverer.problem is not None and not isinstance(deliverer, LocalDeliverer):
                problems.append(deliverer.problem)
        return "; ".join(problems) if problems else None

    def state(self) -> dict[str, dict[str, object]]:
        """Each consumer's backlog at the last look and what it reports, for ``/readyz``."""
        report: dict[str, dict[str, object]] = {}
        for deliverer in self.deliverers:
            stats = self.backlogs.stats.get(deliverer.name)
            report[deliverer.name] = {
                "pending": stats.depth if stats is not None else None,
                "oldest_pending_s": round(stats.oldest_age_s, 1) if stats is not None else None,
                "dead_letters": stats.dead if stats is not None else None,
                "problem": self.lag_problem(deliverer.name) or deliverer.problem,
            }
        return report

    # ------------------------------------------------------------------ the log

    async def append(self, event: PlateEvent) -> bool:
        """Commit ``event`` to the log with a pending delivery per consumer (durable when
        this returns), then wake the workers; False when it was not added (there already, or
        its pass erased). Raises :class:`~streamer.delivery.outbox.OutboxError` when it
        cannot be stored."""
        if self._closing is not None:
            raise RuntimeError("the consumers are closed")
        added = await self.outbox.add(event)
        self.wake()
        return added

    def wake(self) -> None:
        for worker in self._workers.values():
            worker.wake.set()

    async def wait_caught_up(
        self, timeout_s: float, *, local_only: bool = False
    ) -> dict[str, Progress]:
        """Wait until no consumer (``local_only``: in this process) has an event pending, or
        ``timeout_s`` passed; then what each delivered in this run and what it has left."""
        deadline = time.monotonic() + timeout_s
        names = [d.name for d in self.deliverers if not local_only or isinstance(d, LocalDeliverer)]
        while True:
            pending = {name: (await self.outbox.stats(name)).depth for name in names}
            if not any(pending.values()) or time.monotonic() >= deadline:
                break
            self.wake()
            await asyncio.sleep(min(CATCH_UP_POLL_S, max(0.0, deadline - time.monotonic())))
        progress = {}
        for name in names:
            worker = self._workers.get(name)
            progress[name] = Progress(
                worker.delivered if worker else 0, worker.dead if worker else 0, pending[name]
            )
        return progress

    async def replace(self, deliverers: Sequence[Deliverer]) -> None:
        """A reload's consumers: those of ``deliverers`` whose name and config are those of a
        running one are kept as they run (they are not started), the others replace theirs
        (or are added), and the running ones not in ``deliverers`` stop. The new ones are
        opened before the old ones close; the swap runs to its end even when the caller is
        cancelled, and a new one that fails to start leaves the one it replaces running."""
        async with self._swap:
            swap = asyncio.create_task(self._replace(list(deliverers)), name="consumers-swap")
            try:
                await asyncio.shield(swap)
            except asyncio.CancelledError:
                await swap  # a cancelled reload still leaves a whole set running
                raise

    async def _replace(self, deliverers: list[Deliverer]) -> None:
        running = {d.name: d for d in self.deliverers}
        kept = [d for d in deliverers if d.name in running and same_consumer(running[d.name], d)]
        kept_names = {d.name for d in kept}
        new = [d for d in deliverers if d.name not in kept_names]
        # What the new consumers open without running (HTTP sessions) opens first: a new one
        # that cannot is not swapped in, and the one it would have replaced stays.
        failed: set[str] = set()
        for deliverer in new:
            if opens_alone(deliverer):
                try:
                    await deliverer.start(self.supervisor, lambda: None)
                except Exception:
                    LOG.exception("%s: could not open; keeping the running one", deliverer.name)
                    failed.add(deliverer.name)
        new = [d for d in new if d.name not in failed]
        stays = [running[name] for name in failed if name in running]
        final = [running[d.name] for d in kept] + stays + new
        self._set_targets(final)  # events from now on
        for name in running:
            if name not in kept_names and name not in failed:
                await self._stop_one(name)
        self.deliverers = tuple(final)
        for deliverer in new:
            await self._start_one(deliverer)
        self.wake()

    async def close(self) -> None:
        """Stop every consumer, give deliveries in flight ``close_timeout_s`` (the rest stay
        pending and go after a restart), and close the outbox if the set owns it.
        Idempotent."""
        if self._closing is None:
            self._closing = asyncio.create_task(self._close(), name="consumers-close")
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        for part in self._parts.pop(HOUSEKEEPING_PART, ()):
            await self.supervisor.remove(part)
        await asyncio.gather(*(self._stop_one(name) for name in list(self._workers)))
        with contextlib.suppress(OutboxError, RuntimeError):
            await self.refresh_metrics()
        if self.owns_outbox:
            await self.outbox.close()

    # ------------------------------------------------------------------ MQTT's retained

    async def forget(self, *, plate: str | None = None, event_id: str | None = None) -> int:
        """Clear what the MQTT broker retains of ``plate`` or the pass ``event_id`` (an
        erasure); how many retained messages."""
        count = 0
        for deliverer in self.deliverers:
            if isinstance(deliverer, MqttDeliverer):
                count += await deliverer.forget(plate=plate, event_id=event_id)
        return count

    async def erase_passes(self, pass_ids: Iterable[str]) -> int:
        """Passes erased: MQTT clears what it retains of them, now or at its next connect
        (the log's erasure records tell it again after a restart); how many cleared now."""
        ids = set(pass_ids)
        count = 0
        for deliverer in self.deliverers:
            if isinstance(deliverer, MqttDeliverer):
                count += await deliverer.erase_passes(ids)
        return count

    async def cameras_changed(
        self,
        cameras: Sequence[str],
        configured: Sequence[str] | None = None,
        areas: Mapping[str, str | None] | None = None,
    ) -> None:
        """The running cameras after a reload (MQTT's discovery follows them); ``configured``:
        every camera of the config, some run by other replicas (default: ``cameras``);
        ``areas``: where each camera is."""
        for deliverer in self.deliverers:
            if isinstance(deliverer, MqttDeliverer):
                await deliverer.set_cameras(cameras, configured, areas)

    # ------------------------------------------------------------------ dead letters

    async def dead_letters(self, target: str | None = None) -> list[DeadLetter]:
        return await self.outbox.dead_letters(target)

    async def redrive(
        self, event_ids: Iterable[str] | None = None, target: str | None = None
    ) -> int:
        """Dead letters back to pending (None: all), delivered at once; returns the count."""
        count = await self.outbox.redrive(event_ids, target)
        self.wake()
        return count

    # ------------------------------------------------------------------ housekeeping

    async def refresh_metrics(self) -> None:
        """Each consumer's backlog now: the lag gauges, and what readiness reports of it."""
        await self.backlogs.refresh(self.targets)

    def lag_problem(self, name: str) -> str | None:
        """Why consumer ``name``'s backlog is a problem (too old, too long), or None."""
        return self.backlogs.problem(name)

    async def _run_housekeeping(self) -> None:
        await self.backlogs.run(lambda: self.targets)
