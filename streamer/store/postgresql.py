"""The event history in PostgreSQL: one history for every streamer replica.

The same three tables as the SQLite backend (streamer/store/sqlite.py), the same rules: a
pass's latest version is what a search returns (``passes``), every version is kept
(``versions``), the pictures live apart (``pictures``); searches use the same terms
(:func:`~streamer.store.base.search_conditions`). Plate texts use the ``C`` collation, so
that a prefix search is a byte range on the index whatever the database's locale.

``lpr_store_schema`` holds the tables' version: schema 2 added ``passes.withheld`` (withheld
passes, ``plate.withheld`` events, kept apart from the reported ones); the first replica of
this version to start adds it to a history of schema 1 (whose passes are reported ones), and
a replica of an older version then refuses the history rather than show withheld passes as
reported ones.

Several replicas write and prune the same tables at once: every write is one transaction, a
version older than the one kept changes nothing (``ON CONFLICT ... WHERE``), and ``seq``
(a ``bigserial``) orders the passes as they were stored by any replica, so a cursor works
across them. Fuzzy search reads the distinct plate texts each time (another replica may have
added some), then matches them with the same edit distance as the SQLite backend.

asyncpg, a small pool; every statement has ``command_timeout``, a connection attempt
``CONNECT_TIMEOUT_S``. A database error becomes :class:`~streamer.store.base.StoreError`
(logged once per call, naming the server without its password). ``max_bytes`` counts the
bytes of payloads and pictures (PostgreSQL gives space back only on VACUUM); an erasure
deletes the rows and vacuums the three tables, so their space is reused; the server's WAL
and backups follow its operator's retention.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import asyncpg

from streamer.delivery.events import PlateEvent
from streamer.foundation.redact import redact_text, redact_url
from streamer.store.base import (
    EventQuery,
    Page,
    StaleLeaseError,
    StoredEvent,
    StoreError,
    decode_cursor,
    normalise_plate,
    page_of,
    search_statement,
)
from streamer.store.pooling import refuse_transaction_pooling
from streamer.store.schema import POSTGRESQL, history_schema, passes_holding

LOG = logging.getLogger(__name__)
T = TypeVar("T")

SCHEMA_VERSION = 2
#: Seconds to connect, and for one statement.
CONNECT_TIMEOUT_S = 10.0
COMMAND_TIMEOUT_S = 30.0
POOL_SIZE = 4
VERSION_TABLE = "CREATE TABLE IF NOT EXISTS lpr_store_schema (version integer NOT NULL);"
#: Version -> what makes a history of that version the next one (idempotent; run only on a
#: history older than SCHEMA_VERSION, or a new one, before SCHEMA).
MIGRATIONS = {
    # 2: withheld passes (plate.withheld events) kept beside the reported ones.
    1: "ALTER TABLE IF EXISTS passes ADD COLUMN IF NOT EXISTS withheld boolean NOT NULL "
    "DEFAULT false;",
}
SCHEMA = (
    history_schema(POSTGRESQL)
    + """
-- One row: the installation's id, shared by its replicas (streamer/store/installation.py).
CREATE TABLE IF NOT EXISTS lpr_installation (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    id text NOT NULL
);
"""
)
#: The newer term of an event's camera lease that had started when the event was decided
#: (``lpr_lease_terms`` is written by the leases: streamer/pipeline/leases.py, "Fencing").
NEWER_TERM = """
SELECT token, holder, started_at FROM lpr_lease_terms
WHERE camera = $1 AND token > $2 AND started_at <= to_timestamp($3)
ORDER BY token LIMIT 1
"""
_MARK = re.compile(r"\?")


def numbered(sql: str) -> str:
    """``?`` argument marks (the shared search terms) as PostgreSQL's ``$1``, ``$2``, ..."""
    count = iter(range(1, 10_000))
    return _MARK.sub(lambda _: f"${next(count)}", sql)


class PostgresEventStore:
    """Open with ``await PostgresEventStore.open(dsn)``; see the module docstring."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        #: The server as logs and errors name it: the DSN without its password.
        self.where = redact_url(dsn)
        self._pool: asyncpg.Pool | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresEventStore({self.where!r})"

    @classmethod
    async def open(cls, dsn: str) -> PostgresEventStore:
        """Connect and create the tables if missing; raises :class:`StoreError` when it
        cannot (the server unreachable, refused credentials, a newer schema, a
        transaction-pooling proxy in between: streamer/store/pooling.py)."""
        store = cls(dsn)
        try:
            await store._guard("open", lambda: refuse_transaction_pooling(dsn, store.where))
            store._pool = await store._guard(
                "open",
                lambda: asyncpg.create_pool(
                    dsn,
                    min_size=1,
                    max_size=POOL_SIZE,
                    timeout=CONNECT_TIMEOUT_S,
                    command_timeout=COMMAND_TIMEOUT_S,
                ),
            )
            await store._call(store._set_up, "open")
        except BaseException:
            await store.close()
            raise
        return store

    async def _set_up(self, conn: asyncpg.Connection) -> None:
        async with conn.transaction():
            # One replica creates the tables at a time.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('lpr_store_schema'))")
            await conn.execute(VERSION_TABLE)
            found = await conn.fetchval("SELECT max(version) FROM lpr_store_schema")
            if found is not None and found > SCHEMA_VERSION:
                raise StoreError(
                    f"event store {self.where}: schema {found} is newer than this version "
                    f"understands ({SCHEMA_VERSION})"
                )
            # A history of this version is left alone (an ALTER TABLE would lock the
            # passes against the other replicas at every start).
            for version in range(found or 1, SCHEMA_VERSION):
                if version in MIGRATIONS:
                    await conn.execute(MIGRATIONS[version])
            await conn.execute(SCHEMA)
            if found is None:
                await conn.execute("INSERT INTO lpr_store_schema VALUES ($1)", SCHEMA_VERSION)
            elif found < SCHEMA_VERSION:
                await conn.execute("UPDATE lpr_store_schema SET version = $1", SCHEMA_VERSION)
                LOG.info(
                    "event store %s: schema %d brought up to %d", self.where, found, SCHEMA_VERSION
                )

    async def installation_id(self, candidate: str) -> str:
        """The installation's id kept in this history; ``candidate`` becomes it when none is
        (the first replica to ask wins, the others read its id)."""

        async def run(conn: asyncpg.Connection) -> str:
            insert = "INSERT INTO lpr_installation (id) VALUES ($1) ON CONFLICT DO NOTHING"
            await conn.execute(insert, candidate)
            return str(await conn.fetchval("SELECT id FROM lpr_installation"))

        return await self._call(run, "installation id")

    async def _guard(self, what: str, run: Callable[[], Awaitable[T]]) -> T:
        try:
            return await run()
        except StoreError:
            raise
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            detail = redact_text(str(exc)) or type(exc).__name__
            LOG.error(
                "event store %s: %s failed: %s: %s", self.where, what, type(exc).__name__, detail
            )
            raise StoreError(f"event store {what} failed ({self.where}): {detail}") from exc

    async def _call(self, fn: Callable[[asyncpg.Connection], Awaitable[T]], what: str) -> T:
        if self._closed or self._pool is None:
            raise StoreError("the event store is closed")
        pool = self._pool

        async def run() -> T:
            async with pool.acquire(timeout=CONNECT_TIMEOUT_S) as conn:
                return await fn(conn)

        return await self._guard(what, run)

    async def close(self) -> None:
        """Close the pool (bounded: a server that does not answer is let go). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    await self._pool.close()
            except TimeoutError:
                self._pool.terminate()

    # ------------------------------------------------------------------ writes

    async def add(self, event: PlateEvent) -> None:
        """Keep ``event`` (a new pass, or a newer version of one: the latest wins)."""
        payload = json.dumps(event.to_dict(include_crop=False), ensure_ascii=False)
        label = event.match["label"] if event.match else None
        first_seen = datetime.fromisoformat(event.first_seen.utc).timestamp()

        async def add(conn: asyncpg.Connection) -> None:
            if event.lease is not None:
                await _refuse_stale(conn, event)
            async with conn.transaction():
                await conn.execute(
                    "INSERT INTO passes (event_id, camera, text, label, alert, first_seen, "
                    "version, payload, withheld) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
                    "ON CONFLICT (event_id) DO UPDATE SET text=excluded.text, "
                    "label=excluded.label, alert=excluded.alert, version=excluded.version, "
                    "payload=excluded.payload, withheld=excluded.withheld "
                    "WHERE excluded.version > passes.version",
                    event.event_id,
                    event.camera,
                    event.text,
                    label,
                    event.alert,
                    first_seen,
                    event.version,
                    payload,
                    event.withheld is not None,
                )
                await conn.execute(
                    "INSERT INTO versions (event_id, version, payload) VALUES ($1, $2, $3) "
                    "ON CONFLICT (event_id, version) DO UPDATE SET payload=excluded.payload",
                    event.event_id,
                    event.version,
                    payload,
                )
                # A version older than the kept one (arrived late) changes no picture either.
                await conn.execute(
                    "INSERT INTO pictures (event_id, crop, frame) VALUES ($1, $2, $3) "
                    "ON CONFLICT (event_id) DO UPDATE SET crop=excluded.crop, "
                    "frame=coalesce(excluded.frame, pictures.frame) "
                    "WHERE (SELECT version FROM passes WHERE event_id = excluded.event_id) = $4",
                    event.event_id,
                    bytes(event.crop_jpeg),
                    event.frame_jpeg,
                    event.version,
                )

        await self._call(add, "add")

    async def prune(
        self, *, now: float, retention_s: float, by_label: dict[str, float], max_bytes: int
    ) -> int:
        """Delete the passes past their retention (``by_label``: label -> seconds; the others
        ``retention_s``), then the oldest while payloads and pictures take more than
        ``max_bytes``; with their versions and pictures. How many passes were deleted."""

        async def prune(conn: asyncpg.Connection) -> int:
            labels = list(by_label)
            deleted = await _delete(
                conn,
                "first_seen < $1 AND (label IS NULL OR NOT (label = ANY($2::text[])))",
                now - retention_s,
                labels,
            )
            for label, seconds in by_label.items():
                deleted += await _delete(
                    conn, "label = $1 AND first_seen < $2", label, now - seconds
                )
            while await _used_bytes(conn) > max_bytes:
                count = await conn.fetchval("SELECT count(*) FROM passes")
                if not count:
                    break
                oldest = "seq IN (SELECT seq FROM passes ORDER BY first_seen LIMIT $1)"
                deleted += await _delete(conn, oldest, max(1, count // 100))
            return deleted

        return await self._call(prune, "prune")

    async def erase(self, *, plate: str | None = None, event_id: str | None = None) -> int:
        """Delete every pass that holds ``plate`` anywhere (any version's payload), or the
        pass ``event_id``, with versions and pictures; then vacuum. How many passes."""
        if (plate is None) == (event_id is None):
            raise ValueError("erase by plate or by event id")

        async def erase(conn: asyncpg.Connection) -> int:
            if event_id is not None:
                deleted = await _delete(conn, "event_id = $1", event_id)
            else:
                quoted = json.dumps(normalise_plate(plate or ""))  # as the payloads hold it
                deleted = await _delete(conn, passes_holding(POSTGRESQL), quoted)
            if deleted:
                await conn.execute("VACUUM passes, versions, pictures")
            return deleted

        return await self._call(erase, "erase")

    # ------------------------------------------------------------------ reads

    async def get(self, event_id: str) -> StoredEvent | None:
        async def get(conn: asyncpg.Connection) -> StoredEvent | None:
            row = await conn.fetchrow(
                "SELECT p.seq, p.payload, pic.frame IS NOT NULL FROM passes p "
                "LEFT JOIN pictures pic ON pic.event_id = p.event_id WHERE p.event_id = $1",
                event_id,
            )
            if row is None:
                return None
            versions = await conn.fetch(
                "SELECT payload FROM versions WHERE event_id = $1 ORDER BY version", event_id
            )
            return StoredEvent(
                event_id,
                row[0],
                json.loads(row[1]),
                [json.loads(v[0]) for v in versions],
                bool(row[2]),
            )

        return await self._call(get, "get")

    async def search(self, query: EventQuery) -> Page:
        if query.cursor:
            decode_cursor(query.cursor)  # a bad cursor is the caller's error, not the database's

        async def search(conn: asyncpg.Connection) -> Page:
            texts: list[str] = []
            if query.fuzzy and query.plate:
                texts = [r[0] for r in await conn.fetch("SELECT DISTINCT text FROM passes")]
            sql, args, limit = search_statement(query, texts)
            return page_of(await conn.fetch(numbered(sql), *args), limit)

        return await self._call(search, "search")

    async def crop(self, event_id: str) -> bytes | None:
        return await self._picture(event_id, "crop")

    async def frame(self, event_id: str) -> bytes | None:
        return await self._picture(event_id, "frame")

    async def _picture(self, event_id: str, column: str) -> bytes | None:
        sql = f"SELECT {column} FROM pictures WHERE event_id = $1"  # column: crop or frame

        async def picture(conn: asyncpg.Connection) -> bytes | None:
            value = await conn.fetchval(sql, event_id)
            return bytes(value) if value is not None else None

        return await self._call(picture, column)


async def _refuse_stale(conn: asyncpg.Connection, event: PlateEvent) -> None:
    """Raise :class:`StaleLeaseError` when ``event``'s camera had a newer lease term than the
    one it carries before it was decided (a stale holder's late event)."""
    assert event.lease is not None
    try:
        newer = await conn.fetchrow(
            NEWER_TERM, event.camera, event.lease.token, event.lease.decided_at_unix
        )
    except asyncpg.UndefinedTableError:
        return  # no lease was ever taken on this database: no newer term either
    if newer is not None:
        raise StaleLeaseError(
            f"event {event.message_id} of camera {event.camera} was decided at "
            f"{event.lease.decided_at} under lease token {event.lease.token}, after "
            f"another replica ({newer['holder']}) took the camera's lease (token "
            f"{newer['token']}, at {newer['started_at'].isoformat(timespec='milliseconds')}): "
            "a stale holder's event, refused"
        )


async def _delete(conn: asyncpg.Connection, where: str, *args: Any) -> int:
    """Delete the passes ``where`` holds (their versions and pictures cascade); how many."""
    status = await conn.execute(f"DELETE FROM passes WHERE {where}", *args)
    return int(status.split()[-1])  # "DELETE <count>"


async def _used_bytes(conn: asyncpg.Connection) -> int:
    """Bytes the history's payloads and pictures hold."""
    value = await conn.fetchval(
        "SELECT coalesce((SELECT sum(octet_length(payload)) FROM versions), 0) + "
        "coalesce((SELECT sum(octet_length(crop) + coalesce(octet_length(frame), 0)) "
        "FROM pictures), 0)"
    )
    return int(value)
