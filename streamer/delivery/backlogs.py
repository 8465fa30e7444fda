"""Each consumer's backlog in the event log, looked after: the lag gauges, the problems
readiness reports of it, the bound of ``outbox.max_pending``, and pruning.

:meth:`Backlogs.run` is the ``outbox:housekeeping`` part of the consumers
(streamer/delivery/consumers.py): every ``stats_interval_s`` it reads each consumer's
backlog (``lpr_outbox_depth``, ``lpr_outbox_oldest_undelivered_age_seconds``), warns once
per episode of a backlog near ``outbox.max_pending`` and, beyond it, turns that consumer's
oldest pending events into dead letters (re-drivable: never deleted unseen); every
``outbox.prune_interval_s`` it prunes what every consumer has (``outbox.retention_s``) and
old dead letters (``outbox.dead_letter_retention_s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence

from streamer.config import OutboxConfig
from streamer.delivery.outbox import Outbox, OutboxError
from streamer.delivery.outbox_sql import OutboxStats
from streamer.foundation.metrics import Metrics

LOG = logging.getLogger(__name__)

#: Seconds between two looks at the backlogs (the lag gauges, readiness's lag problems).
STATS_INTERVAL_S = 5.0
#: A backlog this share of ``outbox.max_pending`` is warned of (and a readiness problem).
PENDING_WARN_SHARE = 0.8


class Backlogs:
    """The consumers' backlogs of one outbox (see the module docstring)."""

    def __init__(
        self,
        outbox: Outbox,
        config: OutboxConfig,
        metrics: Metrics,
        *,
        stats_interval_s: float = STATS_INTERVAL_S,
    ) -> None:
        self.outbox = outbox
        self.config = config
        self.metrics = metrics
        self.stats_interval_s = stats_interval_s
        #: consumer name -> its backlog at the last look.
        self.stats: dict[str, OutboxStats] = {}
        self._warned: set[str] = set()  # consumers whose backlog was warned of

    async def refresh(self, names: Iterable[str]) -> None:
        """The backlog of each of ``names`` now: the lag gauges, and :meth:`problem`'s."""
        for name in names:
            stats = await self.outbox.stats(name)
            self.stats[name] = stats
            self.metrics.outbox_depth.labels(name).set(stats.depth)
            self.metrics.outbox_oldest_age.labels(name).set(stats.oldest_age_s)

    def problem(self, name: str) -> str | None:
        """Why consumer ``name``'s backlog is a problem (too old, too long), or None."""
        stats = self.stats.get(name)
        if stats is None:
            return None
        config = self.config
        if stats.depth >= PENDING_WARN_SHARE * config.max_pending:
            return (
                f"consumer {name}: {stats.depth} events pending, near outbox.max_pending "
                f"({config.max_pending})"
            )
        if config.max_lag_s and stats.depth and stats.oldest_age_s > config.max_lag_s:
            return (
                f"consumer {name}: {stats.depth} events behind, the oldest "
                f"{stats.oldest_age_s:.0f} s (outbox.max_lag_s: {config.max_lag_s:g})"
            )
        return None

    async def bound(self) -> None:
        """Warn of a backlog near ``outbox.max_pending`` (once per episode); beyond it, the
        oldest pending events of that consumer become dead letters."""
        limit = self.config.max_pending
        for name, stats in self.stats.items():
            if stats.depth < PENDING_WARN_SHARE * limit:
                if name in self._warned:
                    self._warned.discard(name)
                    LOG.info("consumer %s: its backlog is down to %d", name, stats.depth)
                continue
            if name not in self._warned:
                self._warned.add(name)
                LOG.warning(
                    "consumer %s: %d events pending, near outbox.max_pending (%d): beyond it "
                    "the oldest become dead letters",
                    name,
                    stats.depth,
                    limit,
                )
            if stats.depth > limit:
                reason = f"backlog over outbox.max_pending ({limit})"
                moved = await self.outbox.trim_pending(name, limit, reason)
                if moved:
                    LOG.error(
                        "consumer %s: %d oldest pending event(s) made dead letters (%s); "
                        "re-drive them with `python -m streamer deadletters redrive`",
                        name,
                        moved,
                        reason,
                    )

    async def run(self, names: Callable[[], Sequence[str]]) -> None:
        """Look after the backlogs of the consumers ``names()`` gives, until cancelled."""
        next_prune = time.monotonic()
        config = self.config
        while True:
            with contextlib.suppress(OutboxError):  # logged and counted by the outbox
                await self.refresh(names())
                await self.bound()
            if time.monotonic() >= next_prune:
                next_prune = time.monotonic() + config.prune_interval_s
                with contextlib.suppress(OutboxError):
                    pruned = await self.outbox.prune(
                        config.retention_s, config.dead_letter_retention_s
                    )
                    if pruned:
                        LOG.info("outbox: pruned %d event(s) every consumer has", pruned)
            wait = min(self.stats_interval_s, next_prune - time.monotonic())
            await asyncio.sleep(max(0.0, wait))
