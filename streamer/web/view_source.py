"""What the web view may read from the running service (no secrets), and the one thing it
may ask of it: a reload of the config file. The types it reads are the domain's
(streamer/domain/cameras.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from streamer.delivery.events import PlateEvent
from streamer.domain.cameras import CameraStatus, Snapshot

if TYPE_CHECKING:
    from streamer.store.base import EventStore


class ViewSource(Protocol):
    def camera_status(self) -> list[CameraStatus]: ...

    def snapshot(self, camera: str) -> Snapshot | None:
        """None when the camera is unknown or nothing was recognised yet."""
        ...

    def recent_events(self) -> list[PlateEvent]:
        """The newest version of each recent pass, newest last, bounded."""
        ...

    def event(self, event_id: str) -> PlateEvent | None:
        """A message by its id (``PlateEvent.message_id``), or a pass's newest by event id."""
        ...

    def watch_events(self, watcher: Callable[[PlateEvent], None]) -> Callable[[], None]:
        """Call ``watcher`` (on the loop; it must not block) with every new event message,
        until the returned function is called."""
        ...

    def labels(self) -> list[str]:
        """The known-plate lists (labels), global and per camera."""
        ...

    def shards(self) -> dict[str, Any]:
        """This replica (``shard``: ``I/N``) and which replica runs each enabled camera of
        the config (``cameras``: name -> index)."""
        ...

    def history(self) -> EventStore | None:
        """The event history to search, when the service keeps one (``storage:``) and it is
        open."""
        ...

    def keeps_history(self) -> bool:
        """Whether the service keeps a history (``storage.enabled``), open yet or not."""
        ...

    async def erase(
        self, *, plate: str | None = None, event_id: str | None = None, trigger: str
    ) -> dict[str, int]:
        """Erase every trace of ``plate``, or the pass ``event_id``; counts per place."""
        ...

    async def reload(self, trigger: str) -> dict[str, Any]:
        """Read the config file again and apply it; ``outcome`` is applied, unchanged or
        refused (with ``error``: the one-line reason)."""
        ...
