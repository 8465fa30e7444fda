"""The event history's interface: what is kept of an event, how it is searched.

A backend (streamer/store/sqlite.py for one machine, streamer/store/postgresql.py for one
history shared by many replicas) implements :class:`EventStore`; both search with
:func:`search_conditions`. Events are kept per vehicle pass: the pass's latest version is what a
search returns, every version (the first report and each correction) is kept beside it, and
so are the plate crop and the picture of the vehicle. A withheld pass (a ``plate.withheld``
event: decided, but not reported) is kept like any pass, marked ``withheld``, and pruned and
erased like any; a search returns only the reported passes unless it asks for the withheld
ones (``EventQuery.withheld``).

Pages are ordered newest first by the order the service stored the passes in (``seq``), and
a cursor names the last pass of a page: a pass stored after the first page was read is
never in a later page, and none is skipped or given twice, however many arrive meanwhile.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from streamer.config import StorageConfig
from streamer.delivery.events import PlateEvent
from streamer.foundation.redact import redact_url

#: Passes per page, by default and at most.
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
#: Edit distance of a fuzzy search (``O567AM7`` finds ``O567AM76``).
FUZZY_DISTANCE = 1
#: Beyond the highest character of a plate text: the upper end of a prefix range.
_PREFIX_END = "\U0010ffff"
#: What a cursor decodes to: ``s`` and a sequence number in ASCII digits.
_CURSOR = re.compile(r"s[0-9]{1,19}")


class StoreError(Exception):
    """The history's database failed (disk full, I/O error, unreadable file, ...)."""


class StaleLeaseError(Exception):
    """An event of a stale lease holder: its camera had a newer lease before the event was
    decided (streamer/pipeline/leases.py, "Fencing"); the history never keeps it."""


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
    #: False: only the reported passes (the default); True: only the withheld ones; None: both.
    withheld: bool | None = False
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
        if _CURSOR.fullmatch(text) is None:
            raise ValueError(text)
        seq = int(text[1:])
        if seq >= 2**63:  # no database integer holds it: no cursor of ours
            raise ValueError(text)
        return seq
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise CursorError(f"not a cursor of this service: {cursor[:40]!r}") from None


async def open_event_store(config: StorageConfig) -> EventStore:
    """The history of ``config`` (its backend), open; raises :class:`StoreError`."""
    if config.backend == "postgresql":
        from streamer.store.postgresql import PostgresEventStore  # asyncpg only when used

        assert config.dsn is not None  # checked by the config
        return await PostgresEventStore.open(config.dsn.get_secret_value())
    from streamer.store.sqlite import SQLiteEventStore

    return await SQLiteEventStore.open(config.path)


def describe_store(config: StorageConfig) -> str:
    """Where the history of ``config`` lives, as messages name it (no password)."""
    if config.backend == "postgresql" and config.dsn is not None:
        return redact_url(config.dsn.get_secret_value())
    return str(config.path)


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


def normalise_plate(text: str) -> str:
    """A plate as the service writes it: upper case, no spaces or dashes."""
    return "".join(ch for ch in text.upper() if ch.isalnum())


def search_conditions(query: EventQuery, texts: list[str]) -> tuple[list[str], list[Any]]:
    """The WHERE terms of ``query`` (on the passes, as ``p``; ``?`` marks an argument) and
    their arguments (``texts``: every distinct plate text, for a fuzzy search). Every backend
    searches with these: one set of search rules."""
    where: list[str] = []
    args: list[Any] = []
    if query.plate:
        plate = normalise_plate(query.plate)
        if query.fuzzy:
            near = process.extract(
                plate, texts, scorer=Levenshtein.distance, score_cutoff=FUZZY_DISTANCE, limit=None
            )
            matches = [text for text, _, _ in near] or [plate]
            where.append(f"p.text IN ({', '.join('?' * len(matches))})")
            args += matches
        elif query.prefix:
            where.append("p.text >= ? AND p.text < ?")
            args += [plate, plate + _PREFIX_END]
        else:
            where.append("p.text = ?")
            args.append(plate)
    for column, value in (("camera", query.camera), ("label", query.label)):
        if value is not None:
            where.append(f"p.{column} = ?")
            args.append(value)
    if query.alert is not None:
        where.append("p.alert = ?")
        args.append(query.alert)
    if query.withheld is not None:
        # Written out, not an argument: each side has a partial index of its own whose
        # condition the planner must see in the query (SQLite and PostgreSQL alike).
        where.append("p.withheld" if query.withheld else "NOT p.withheld")
    if query.after is not None:
        where.append("p.first_seen >= ?")
        args.append(query.after)
    if query.before is not None:
        where.append("p.first_seen < ?")
        args.append(query.before)
    return where, args


def search_statement(query: EventQuery, texts: list[str]) -> tuple[str, list[Any], int]:
    """The whole search of ``query`` on the passes (``?`` marks an argument), its arguments
    and the page size; one more row than the page is asked for, to know whether another page
    follows (:func:`page_of`). ``texts``: every distinct plate text, for a fuzzy search."""
    limit = max(1, min(query.limit, MAX_LIMIT))
    where, args = search_conditions(query, texts)
    if query.cursor:
        where.append("p.seq < ?")
        args.append(decode_cursor(query.cursor))
    sql = (
        "SELECT p.seq, p.event_id, p.payload, pic.frame IS NOT NULL FROM passes p "
        "LEFT JOIN pictures pic ON pic.event_id = p.event_id"
    )
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql + " ORDER BY p.seq DESC LIMIT ?", [*args, limit + 1], limit


def page_of(rows: Sequence[Sequence[Any]], limit: int) -> Page:
    """The page of a :func:`search_statement`'s rows (seq, event id, payload, has frame)."""
    events = [StoredEvent(r[1], r[0], json.loads(r[2]), [], bool(r[3])) for r in rows]
    more = len(events) > limit
    events = events[:limit]
    return Page(events, encode_cursor(events[-1].seq) if more else None)
