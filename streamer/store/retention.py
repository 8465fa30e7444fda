"""Keeping the history within its retention and size: the ``history`` part of the service."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from streamer.config import StorageConfig
from streamer.store.base import EventStore

LOG = logging.getLogger(__name__)
_DAY_S = 86_400.0
_GB = 1_000_000_000


async def keep_within_retention(
    store: EventStore, config: StorageConfig, clock: Callable[[], float] = time.time
) -> None:
    """Prune the history now and every ``prune_interval_s``, until cancelled (supervised:
    a database error ends the run, and the supervisor tries again after a backoff)."""
    by_label = {r.label: r.days * _DAY_S for r in config.retention_by_label}
    while True:
        deleted = await store.prune(
            now=clock(),
            retention_s=config.retention_days * _DAY_S,
            by_label=by_label,
            max_bytes=int(config.max_size_gb * _GB),
        )
        if deleted:
            LOG.info("history: %d event(s) past their retention or the size cap deleted", deleted)
        await asyncio.sleep(config.prune_interval_s)
