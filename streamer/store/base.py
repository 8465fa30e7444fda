"""The event history's interface: what is kept of an event, how it is searched.

A backend (streamer/store/sqlite.py today; PostgreSQL for many replicas later) implements
:class:`EventStore`. Events are kept per vehicle pass: the pass's latest version is what a
search returns, every version (the first report and each correction) is kept beside it, and
so are the plate crop and the picture of the vehicle.

Pages are ordered newest first by the order the service stored the passes in (``seq``), and
a cursor names the last pass of a page: a pass stored after the first page was read is
never in a later page, and none is skipped or given twice, however many arrive meanwhile.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any, Protocol

from streamer.delivery.events import PlateEvent

#: Passes per page, by default and at most.
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
#: Edit distance of a fuzzy search (``O567AM7`` finds ``O567AM76``).
FUZZY_DISTANCE = 1


class StoreError(Exception):
    """The history's database failed (disk full, I/O error, unreadable file, ...)."""


class CursorError(ValueError):
    """A cursor this store did not give out."""


@dataclass(frozen=True)
class EventQuery:
    """A search: every given criterion must hold (an empty query: every pass)."""

    #: The plate text: exact, or its start with ``prefix``, or within FUZZY_DISTANCE edits.
    plate: str | None = None
    prefix: bool = False
    fuzzy: bool = False
    camera: str | None = None
    #: First seen at or after / before these Unix times.
    after: float | None = None
    before: float | None = None
    #: The known-plate list matched.
    label: str | None = None
    alert: bool | None = None
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None


@dataclass(frozen=True)
class StoredEvent:
    """One pass as kept: its latest payload (``PlateEvent.to_dict`` without the crop) and
    every version's, oldest first."""

    event_id: str
    seq: int
    payload: dict[str, Any]
    versions: list[dict[str, Any]] = field(default_factory=list)
    has_frame: bool = False


@dataclass(frozen=True)
class Page:
    events: list[StoredEvent]
    #: The cursor of the next page; None: this is the last one.
    next_cursor: str | None


def encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"s{seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if not text.startswith("s"):
            raise ValueError(text)
        return int(text[1:])
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise CursorError(f"not a cursor of this service: {cursor[:40]!r}") from None


class EventStore(Protocol):
    """Where the event history lives (see the module docstring). Every method is a coroutine
    that does its I/O off the event loop."""

    async def add(self, event: PlateEvent) -> None:
        """Keep ``event``: a new pass, or a new version of one (the latest wins)."""
        ...

    async def get(self, event_id: str) -> StoredEvent | None: ...

    async def search(self, query: EventQuery) -> Page: ...

    async def crop(self, event_id: str) -> bytes | None:
        """The JPEG of the plate of the pass's latest version."""
        ...

    async def frame(self, event_id: str) -> bytes | None:
        """The JPEG of the vehicle (the frame around the plate)."""
        ...

    async def prune(
        self, *, now: float, retention_s: float, by_label: dict[str, float], max_bytes: int
    ) -> int:
        """Delete what is past its retention, then the oldest beyond ``max_bytes``."""
        ...

    async def erase(self, *, plate: str | None = None, event_id: str | None = None) -> int:
        """Delete every pass holding ``plate``, or the pass ``event_id``; how many."""
        ...

    async def close(self) -> None: ...
