"""Events waiting for the event log: a queue in order, bounded in bytes
(streamer/delivery/publisher.py commits its head)."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any

from streamer.delivery.events import PlateEvent

#: Bytes an event is counted for beyond its pictures (its payload, the objects around it).
EVENT_OVERHEAD_BYTES = 4096


def event_bytes(event: PlateEvent) -> int:
    """What an event holds in memory, about: its pictures and a payload's worth."""
    frame = len(event.frame_jpeg) if event.frame_jpeg is not None else 0
    return len(event.crop_jpeg) + frame + EVENT_OVERHEAD_BYTES


class EventQueue:
    """Events waiting for the log, in order, bounded in bytes (see the module docstring).

    Why not ``asyncio.Queue``: its bound counts items, and an item here is anything from
    a few KiB to a MiB; the head also stays in the queue until it is committed.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: collections.deque[tuple[PlateEvent, int]] = collections.deque()
        self._changed = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Any:
        return (event for event, _ in list(self._items))

    def fits(self, size: int) -> bool:
        """Whether an event of ``size`` bytes goes in now (one alone always does)."""
        return not self._items or self.bytes + size <= self.max_bytes

    async def put(self, event: PlateEvent) -> None:
        """Add ``event`` at the end, once there is room for it."""
        size = event_bytes(event)
        await self._until(lambda: self.fits(size))
        self._add(event, size)

    def put_nowait(self, event: PlateEvent) -> None:
        """Add ``event`` whatever the bound (the passes flushed from a cancelled pipeline)."""
        self._add(event, event_bytes(event))

    def _add(self, event: PlateEvent, size: int) -> None:
        self._items.append((event, size))
        self.bytes += size
        self._notify()

    async def head(self) -> PlateEvent:
        """The oldest event, once there is one (it stays until :meth:`pop`)."""
        await self._until(lambda: bool(self._items))
        return self._items[0][0]

    def pop(self, event: PlateEvent) -> None:
        """Take ``event`` out if it is still the oldest (an erasure may have taken it)."""
        if self._items and self._items[0][0] is event:
            _, size = self._items.popleft()
            self.bytes -= size
            self._notify()

    def remove(self, keep: Callable[[PlateEvent], bool]) -> list[PlateEvent]:
        """Take out the events ``keep`` says no to (an erasure); they are returned."""
        gone = [(e, n) for e, n in self._items if not keep(e)]
        if gone:
            self._items = collections.deque((e, n) for e, n in self._items if keep(e))
            self.bytes -= sum(n for _, n in gone)
            self._notify()
        return [e for e, _ in gone]

    def _notify(self) -> None:
        # set() wakes every waiter of the moment; each clears it and looks again.
        self._changed.set()

    async def _until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            self._changed.clear()
            await self._changed.wait()

    async def empty(self) -> None:
        """Return once the queue is empty."""
        await self._until(lambda: not self._items)
