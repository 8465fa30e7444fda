"""The history as a consumer of the event log: every event, with its plate crop and vehicle
picture, written to the store (SQLite or PostgreSQL) at the history's own pace; withheld
passes (``plate.withheld``) too, which a search returns only when asked for them.

A history that fails (a PostgreSQL outage, a locked or full SQLite file) or hangs delays
only itself: its events stay pending in the log and are written again with a capped backoff
until the store takes them (streamer/delivery/deliverer.py, :class:`LocalDeliverer`), also
after a restart. The store's writes are upserts on ``(event_id, version)``, so a write
tried again after one that did go through changes nothing.

An event of a stale lease holder (a camera another replica had taken before the event was
decided: streamer/pipeline/leases.py, "Fencing") is refused by a PostgreSQL history: a dead
letter, never written.
"""

from __future__ import annotations

from streamer.config import HISTORY_CONSUMER
from streamer.delivery.deliverer import LocalDeliverer, RefusedError
from streamer.delivery.events import PlateEvent
from streamer.delivery.outbox_sql import PendingDelivery
from streamer.foundation.metrics import Metrics
from streamer.store.base import EventStore, StaleLeaseError

#: Writes to the store at once (one per camera: each camera's events in order).
HISTORY_CONCURRENCY = 4


class HistoryDeliverer(LocalDeliverer):
    """Writes each event of the log to the store (see the module docstring)."""

    with_crop = True
    with_frame = True
    takes_withheld = True  # kept apart (a search asks for them: streamer/store/base.py)

    def __init__(self, store: EventStore, metrics: Metrics) -> None:
        super().__init__(HISTORY_CONSUMER, metrics, max_concurrency=HISTORY_CONCURRENCY)
        self.store = store

    def describe(self) -> str:
        return "history"

    async def write(self, item: PendingDelivery) -> None:
        if item.crop is None:
            raise ValueError("the history needs the crop (next_batch(with_crop=True))")
        event = PlateEvent.from_payload(item.payload, item.crop, item.frame)
        try:
            await self.store.add(event)
        except StaleLeaseError as exc:
            raise RefusedError(str(exc)) from None
