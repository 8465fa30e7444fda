"""The history as an event sink: the publisher gives it every event, as it gives the others."""

from __future__ import annotations

from streamer.delivery.events import PlateEvent
from streamer.store.base import EventStore


class StoreSink:
    """Writes each event to the store (on the store's thread: inference never waits)."""

    name = "store"

    def __init__(self, store: EventStore) -> None:
        self.store = store

    async def publish(self, event: PlateEvent) -> None:
        await self.store.add(event)

    async def close(self) -> None:
        await self.store.close()
