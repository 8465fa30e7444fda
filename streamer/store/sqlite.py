"""The event history in one SQLite file (WAL), on a database thread of its own.

Three tables: ``passes`` (one row per vehicle pass: its latest version's text, camera,
known-plate label, alert flag, withheld flag, first-seen time and payload; ``seq`` orders the
passes as they were stored), ``versions`` (every version's payload) and ``pictures`` (the
plate crop and the vehicle picture of each pass, apart so that searches never read them).
Indexed by first-seen time, camera, text and label, and the reported and the withheld passes
each by ``seq`` (partial indexes: a page of either is quick however few of them there are).

Schema 2 added ``withheld`` (a file of schema 1 is migrated when opened: its passes are
reported ones).

``synchronous=NORMAL``: a committed event survives a crash of the process; the outbox
(``synchronous=FULL``) is where an event is made safe for delivery, this file is the
history. Every call runs on the store's own thread: the event loop never waits on SQLite.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from streamer.delivery.events import PlateEvent
from streamer.foundation.sqlite_file import open_wal
from streamer.store.base import (
    EventQuery,
    Page,
    StoredEvent,
    StoreError,
    decode_cursor,
    normalise_plate,
    page_of,
    search_statement,
)
from streamer.store.schema import SQLITE, history_schema, passes_holding

LOG = logging.getLogger(__name__)
T = TypeVar("T")

SCHEMA_VERSION = 2
#: Version -> what makes a file of that version the next one (streamer/foundation/sqlite_file.py).
MIGRATIONS = {
    # 2: withheld passes (plate.withheld events) kept beside the reported ones.
    1: "ALTER TABLE passes ADD COLUMN withheld INTEGER NOT NULL DEFAULT 0;",
}
SCHEMA = history_schema(SQLITE)


class SQLiteEventStore:
    """Open with ``await SQLiteEventStore.open(path)``; see the module docstring."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-db")
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        # The distinct plate texts, for fuzzy search (kept by the database thread only; None:
        # to be read again). A scan of the texts' index costs ~100 ms at a million passes.
        self._texts: list[str] | None = None
        self._known: set[str] = set()

    @classmethod
    async def open(cls, path: Path | str) -> SQLiteEventStore:
        """Create or open the store; raises :class:`StoreError` when it cannot."""
        store = cls(Path(path))
        try:
            # The plate texts read once now, on the database thread (~0.2 s at a million
            # passes), so that no fuzzy search waits for them.
            await store._call(store._distinct_texts, "open")
        except StoreError:
            await store.close()
            raise
        return store

    def _connect(self) -> sqlite3.Connection:
        # Deleted rows are overwritten (a plate past its retention leaves no trace in free
        # pages), and free pages go back to the file system (a new file only).
        return open_wal(
            self.path,
            synchronous="NORMAL",
            schema=SCHEMA,
            version=SCHEMA_VERSION,
            too_new=lambda found: sqlite3.DatabaseError(
                f"store schema {found} is newer than this version understands ({SCHEMA_VERSION})"
            ),
            pragmas=("secure_delete=ON", "auto_vacuum=INCREMENTAL"),
            migrations=MIGRATIONS,
        )

    async def _call(self, fn: Callable[[sqlite3.Connection], T], what: str) -> T:
        if self._closed:
            raise StoreError("the event store is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._run, fn, what)

    def _run(self, fn: Callable[[sqlite3.Connection], T], what: str) -> T:
        try:
            if self._conn is None:
                self._conn = self._connect()
            return fn(self._conn)
        except (sqlite3.Error, OSError) as exc:
            LOG.error("event store %s: %s failed: %s: %s", self.path, what, type(exc).__name__, exc)
            raise StoreError(f"event store {what} failed ({self.path}): {exc}") from exc

    async def close(self) -> None:
        """Close the connection (after the calls already made). Idempotent."""
        if self._closed:
            return
        self._closed = True

        def close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, close)
        finally:
            self._executor.shutdown(wait=False)

    # ------------------------------------------------------------------ writes

    async def add(self, event: PlateEvent) -> None:
        """Keep ``event`` (a new pass, or a newer version of one: the latest wins)."""
        payload = json.dumps(event.to_dict(include_crop=False), ensure_ascii=False)
        label = event.match["label"] if event.match else None
        first_seen = datetime.fromisoformat(event.first_seen.utc).timestamp()

        def add(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    "INSERT INTO passes (event_id, camera, text, label, alert, first_seen, "
                    "version, payload, withheld) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT(event_id) DO UPDATE SET text=excluded.text, "
                    "label=excluded.label, alert=excluded.alert, version=excluded.version, "
                    "payload=excluded.payload, withheld=excluded.withheld "
                    "WHERE excluded.version > passes.version",
                    (
                        event.event_id,
                        event.camera,
                        event.text,
                        label,
                        event.alert,
                        first_seen,
                        event.version,
                        payload,
                        event.withheld is not None,
                    ),
                )
                conn.execute(
                    "INSERT OR REPLACE INTO versions (event_id, version, payload) VALUES (?, ?, ?)",
                    (event.event_id, event.version, payload),
                )
                # A version older than the kept one (arrived late) changes no picture either.
                conn.execute(
                    "INSERT INTO pictures (event_id, crop, frame) VALUES (?, ?, ?) "
                    "ON CONFLICT(event_id) DO UPDATE SET crop=excluded.crop, "
                    "frame=coalesce(excluded.frame, pictures.frame) "
                    "WHERE (SELECT version FROM passes WHERE event_id = excluded.event_id) = ?",
                    (event.event_id, event.crop_jpeg, event.frame_jpeg, event.version),
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            if self._texts is not None and event.text not in self._known:
                self._known.add(event.text)
                self._texts.append(event.text)

        await self._call(add, "add")

    async def prune(
        self, *, now: float, retention_s: float, by_label: dict[str, float], max_bytes: int
    ) -> int:
        """Delete the passes first seen more than their retention ago (``by_label``: label
        -> seconds, for the events of those known-plate lists; ``retention_s`` for the
        others), then the oldest while the history takes more than ``max_bytes``; with their
        versions and pictures. Returns how many passes were deleted."""

        def prune(conn: sqlite3.Connection) -> int:
            deleted = 0
            labels = list(by_label)
            others = f"label IS NULL OR label NOT IN ({', '.join('?' * len(labels))})"
            deleted += self._delete(
                conn, f"first_seen < ? AND ({others})", [now - retention_s, *labels]
            )
            for label, seconds in by_label.items():
                deleted += self._delete(
                    conn, "label = ? AND first_seen < ?", [label, now - seconds]
                )
            while _used_bytes(conn) > max_bytes:
                count = conn.execute("SELECT count(*) FROM passes").fetchone()[0]
                if not count:
                    break
                oldest = "seq IN (SELECT seq FROM passes ORDER BY first_seen LIMIT ?)"
                deleted += self._delete(conn, oldest, [max(1, count // 100)])
            if deleted:
                conn.execute("PRAGMA incremental_vacuum")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return deleted

        return await self._call(prune, "prune")

    async def erase(self, *, plate: str | None = None, event_id: str | None = None) -> int:
        """Delete every pass that holds ``plate`` anywhere (its text in any version, a
        candidate, the text a correction replaced, a known plate matched), or the pass
        ``event_id``; with versions and pictures, leaving no trace in the file. Returns
        how many passes were deleted."""
        if (plate is None) == (event_id is None):
            raise ValueError("erase by plate or by event id")

        def erase(conn: sqlite3.Connection) -> int:
            if event_id is not None:
                deleted = self._delete(conn, "event_id = ?", [event_id])
            else:
                quoted = json.dumps(normalise_plate(plate or ""))  # as the payloads hold it
                deleted = self._delete(conn, passes_holding(SQLITE), [quoted])
            if deleted:
                conn.execute("PRAGMA incremental_vacuum")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return deleted

        return await self._call(erase, "erase")

    def _delete(self, conn: sqlite3.Connection, where: str, args: list[Any]) -> int:
        """Delete the passes ``where`` holds (their versions and pictures with them); a plate
        text no pass holds any more leaves the fuzzy search's list."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            select = f"SELECT DISTINCT text FROM passes WHERE {where}"
            texts = [r[0] for r in conn.execute(select, args)]
            deleted = conn.execute(f"DELETE FROM passes WHERE {where}", args).rowcount
            gone = {
                text
                for text in texts
                if conn.execute("SELECT 1 FROM passes WHERE text = ? LIMIT 1", (text,)).fetchone()
                is None
            }
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if gone and self._texts is not None:
            self._known -= gone
            self._texts = [text for text in self._texts if text not in gone]
        return deleted

    def _distinct_texts(self, conn: sqlite3.Connection) -> list[str]:
        if self._texts is None:
            self._texts = [r[0] for r in conn.execute("SELECT DISTINCT text FROM passes")]
            self._known = set(self._texts)
        return self._texts

    # ------------------------------------------------------------------ reads

    async def get(self, event_id: str) -> StoredEvent | None:
        def get(conn: sqlite3.Connection) -> StoredEvent | None:
            row = conn.execute(
                "SELECT p.seq, p.payload, pic.frame IS NOT NULL FROM passes p "
                "LEFT JOIN pictures pic ON pic.event_id = p.event_id WHERE p.event_id = ?",
                (event_id,),
            ).fetchone()
            if row is None:
                return None
            versions = conn.execute(
                "SELECT payload FROM versions WHERE event_id = ? ORDER BY version", (event_id,)
            ).fetchall()
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

        def search(conn: sqlite3.Connection) -> Page:
            texts = self._distinct_texts(conn) if query.fuzzy else []
            sql, args, limit = search_statement(query, texts)
            return page_of(conn.execute(sql, args).fetchall(), limit)

        return await self._call(search, "search")

    async def crop(self, event_id: str) -> bytes | None:
        return await self._picture(event_id, "crop")

    async def frame(self, event_id: str) -> bytes | None:
        return await self._picture(event_id, "frame")

    async def _picture(self, event_id: str, column: str) -> bytes | None:
        sql = f"SELECT {column} FROM pictures WHERE event_id = ?"  # column: crop or frame

        def picture(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(sql, (event_id,)).fetchone()
            return bytes(row[0]) if row is not None and row[0] is not None else None

        return await self._call(picture, column)


def _used_bytes(conn: sqlite3.Connection) -> int:
    """Bytes the history's pages hold (the free ones not counted)."""
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return int((pages - free) * page_size)
