"""The durable webhook outbox: every event is committed to SQLite before any delivery.

One SQLite file in WAL mode holds two tables:

* ``events``: one row per event message (``event_id`` unique: the message id,
  ``PlateEvent.message_id``, which is the event id for a pass's first report and
  ``<event_id>.v<version>`` for a correction; ``seq`` the order it was
  added in, camera, ``created_at``, the JSON payload without the crop, the crop
  JPEG as a BLOB, kept so it can be sent as base64 or served as a URL);
* ``deliveries``: one row per event and target (primary key ``(event_id,
  target)``), ``state`` ``pending`` | ``delivered`` | ``dead``, attempts, the
  time of the next attempt, the last error, when it was delivered. ``seq`` and
  ``camera`` are repeated here so that "the oldest pending event of each camera"
  is one indexed query.

:meth:`Outbox.add` is the durability point: it returns once the event and a
pending delivery per target are committed (``synchronous=FULL``). A delivery
leaves ``pending`` only by :meth:`Outbox.mark_delivered` or
:meth:`Outbox.mark_dead`; a crash in between leaves it pending, so it is sent
again after a restart with the same ``webhook-id`` (at-least-once delivery,
deduplicated by the receiver).

Threading: the one ``sqlite3`` connection lives in one dedicated worker thread
(an executor with a single worker); every public method is a coroutine that
runs its statements there, so the event loop never waits on the disk, and jobs
run in the order they were submitted.

Times stored are wall-clock Unix seconds (``time.time()``): they must survive a
restart, which ``time.monotonic()`` does not.

A database error (``database or disk is full``, I/O error, a read-only file,
...) is never swallowed: it is logged at ERROR, counted in
``lpr_outbox_errors_total``, turns :attr:`Outbox.healthy` False (readiness) and
raises :class:`OutboxError`. The next successful write turns ``healthy`` back on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from streamer.delivery.events import PlateEvent
from streamer.ops.metrics import Metrics

LOG = logging.getLogger(__name__)
T = TypeVar("T")

SCHEMA_VERSION = 1
#: How long a statement waits for another connection's write lock (the CLI's, say).
BUSY_TIMEOUT_S = 5.0

PENDING, DELIVERED, DEAD = "pending", "delivered", "dead"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,  -- insertion order (stable across VACUUM)
    event_id   TEXT    NOT NULL UNIQUE,
    camera     TEXT    NOT NULL,
    created_at REAL    NOT NULL,
    payload    TEXT    NOT NULL,                    -- PlateEvent.to_dict(include_crop=False)
    crop       BLOB    NOT NULL
);
CREATE TABLE IF NOT EXISTS deliveries (
    event_id        TEXT    NOT NULL REFERENCES events(event_id) ON DELETE CASCADE,
    target          TEXT    NOT NULL,
    seq             INTEGER NOT NULL,
    camera          TEXT    NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL    NOT NULL,
    last_attempt_at REAL,
    last_error      TEXT,
    delivered_at    REAL,
    PRIMARY KEY (event_id, target)
);
CREATE INDEX IF NOT EXISTS deliveries_lane ON deliveries (target, state, camera, seq);
CREATE INDEX IF NOT EXISTS deliveries_seq ON deliveries (target, seq);
CREATE INDEX IF NOT EXISTS deliveries_delivered ON deliveries (state, delivered_at);
"""


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path``, None when there is none."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


class OutboxError(Exception):
    """The outbox database failed (disk full, I/O error, read-only, missing file, ...)."""


@dataclass(frozen=True)
class PendingDelivery:
    """An event due for delivery to one target (the oldest pending one of its camera)."""

    event_id: str  # the message id (PlateEvent.message_id): the webhook-id
    camera: str
    seq: int
    created_at: float
    attempts: int
    #: ``PlateEvent.to_dict(include_crop=False)``
    payload: dict[str, Any]
    #: The crop JPEG when asked for (``with_crop=True``), else None.
    crop: bytes | None


@dataclass(frozen=True)
class DeadLetter:
    """An event given up on for one target, with the reason."""

    event_id: str
    target: str
    camera: str
    text: str | None
    created_at: float
    attempts: int
    last_attempt_at: float | None
    reason: str


@dataclass(frozen=True)
class OutboxStats:
    """One target's backlog: undelivered events, the age of the oldest, dead letters."""

    depth: int
    oldest_age_s: float
    dead: int


class Outbox:
    """The SQLite outbox. Open with ``await Outbox.open(path, targets)``; every method is
    a coroutine run on the outbox's own database thread."""

    def __init__(self, path: Path, targets: Sequence[str], metrics: Metrics | None = None) -> None:
        """Use :meth:`open`; this only sets the object up."""
        if len(set(targets)) != len(targets):
            raise ValueError(f"target names must be unique, got {list(targets)}")
        self.path = Path(path)
        self.targets: tuple[str, ...] = tuple(targets)
        self._metrics = metrics
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="outbox-db")
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._healthy = True
        self._file_id: tuple[int, int] | None = None  # the file opened: (device, inode)
        self._last_error: str | None = None

    # ------------------------------------------------------------------ life cycle

    @classmethod
    async def open(
        cls,
        path: Path | str,
        targets: Sequence[str],
        *,
        metrics: Metrics | None = None,
        create: bool = True,
    ) -> Outbox:
        """Open (``create``: or create, with its folder) the outbox at ``path``.

        Raises :class:`OutboxError` when the file cannot be opened or set up.
        """
        outbox = cls(Path(path), targets, metrics)
        try:
            await outbox._call(lambda _: None, "open", connect=create, must_exist=not create)
        except BaseException:
            outbox._executor.shutdown(wait=False)
            raise
        return outbox

    def _connect(self, must_exist: bool) -> sqlite3.Connection:
        if must_exist and not self.path.is_file():
            raise OutboxError(f"no outbox at {self.path}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise sqlite3.OperationalError(
                f"cannot create the folder {self.path.parent}: {exc.strerror}"
            ) from exc
        # isolation_level=None: no implicit transactions; writes use BEGIN IMMEDIATE.
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"cannot switch {self.path} to WAL (got {mode})")
            # FULL: a commit is on disk (WAL fsynced) before add() returns, so an accepted
            # event survives a power cut too, not only a crash of the process (NORMAL
            # would). The cost, one fsync per event or delivery, is nothing at one event
            # per vehicle pass.
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise OutboxError(
                    f"{self.path} has outbox schema {version}, newer than this version "
                    f"understands ({SCHEMA_VERSION})"
                )
            conn.executescript(
                f"BEGIN IMMEDIATE;{_SCHEMA}PRAGMA user_version={SCHEMA_VERSION};COMMIT;"
            )
        except BaseException:
            conn.close()
            raise
        return conn

    async def close(self) -> None:
        """Close the connection (after the jobs already submitted). Idempotent."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()

        def close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        try:
            await loop.run_in_executor(self._executor, close)
        finally:
            self._executor.shutdown(wait=False)

    @property
    def healthy(self) -> bool:
        """False after a database error, until the next successful write (readiness)."""
        return self._healthy

    @property
    def last_error(self) -> str | None:
        """The last database error, for readiness and logs (never holds a secret)."""
        return self._last_error

    # ------------------------------------------------------------------ the DB thread

    async def _call(
        self,
        fn: Callable[[sqlite3.Connection], T],
        what: str,
        *,
        write: bool = False,
        connect: bool = False,
        must_exist: bool = False,
    ) -> T:
        """Run ``fn(connection)`` on the database thread; database errors become
        :class:`OutboxError` (logged, counted, ``healthy`` False). ``write``: inside
        ``BEGIN IMMEDIATE`` ... ``COMMIT`` (rolled back on error)."""
        if self._closed:
            raise RuntimeError("the outbox is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, self._run, fn, what, write, connect, must_exist
        )

    def _run(
        self,
        fn: Callable[[sqlite3.Connection], T],
        what: str,
        write: bool,
        connect: bool,
        must_exist: bool,
    ) -> T:
        try:
            if self._conn is None:
                if not (connect or must_exist):
                    raise RuntimeError("the outbox is closed")
                self._conn = self._connect(must_exist)
                self._file_id = _identity(self.path)
            conn = self._conn
            if not write:
                return fn(conn)
            if _identity(self.path) != self._file_id:
                # SQLite would go on writing to the deleted file, lost at the next start.
                raise OutboxError(
                    f"{self.path} was deleted or replaced while the service runs: what it held "
                    "lives on only in this process; restart the service to start a new outbox"
                )
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                # The original error is the one to report, not a failed rollback.
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            self._fail(what, exc)
            raise OutboxError(f"outbox {what} failed ({self.path}): {exc}") from exc
        except OutboxError as exc:
            self._fail(what, exc)
            raise
        if not self._healthy:
            LOG.warning("outbox %s: writes succeed again after: %s", self.path, self._last_error)
            self._healthy = True
        return result

    def _fail(self, what: str, exc: Exception) -> None:
        self._healthy = False
        self._last_error = f"{what}: {exc}"
        if self._metrics is not None:
            self._metrics.outbox_errors.inc()
        LOG.error("outbox %s: %s failed: %s: %s", self.path, what, type(exc).__name__, exc)

    # ------------------------------------------------------------------ writes

    async def add(self, event: PlateEvent) -> bool:
        """Commit ``event`` and a pending delivery per target; returns after the commit
        (the durability point). False when the event id was already there (nothing done).
        """
        if not self.targets:
            raise ValueError("the outbox was opened without targets: nothing to deliver to")
        payload = json.dumps(event.to_dict(include_crop=False), ensure_ascii=False)
        crop = bytes(event.crop_jpeg)
        targets = self.targets

        def add(conn: sqlite3.Connection) -> bool:
            now = time.time()
            cursor = conn.execute(
                "INSERT OR IGNORE INTO events (event_id, camera, created_at, payload, crop) "
                "VALUES (?, ?, ?, ?, ?)",
                (event.message_id, event.camera, now, payload, crop),
            )
            if cursor.rowcount == 0:
                return False
            seq = cursor.lastrowid
            conn.executemany(
                "INSERT INTO deliveries (event_id, target, seq, camera, state, next_attempt_at) "
                "VALUES (?, ?, ?, ?, 'pending', ?)",
                [(event.message_id, target, seq, event.camera, now) for target in targets],
            )
            return True

        return await self._call(add, "add", write=True)

    async def mark_delivered(self, event_id: str, target: str) -> None:
        def mark(conn: sqlite3.Connection) -> None:
            now = time.time()
            conn.execute(
                "UPDATE deliveries SET state='delivered', attempts=attempts+1, "
                "last_attempt_at=?, delivered_at=?, last_error=NULL "
                "WHERE event_id=? AND target=?",
                (now, now, event_id, target),
            )

        await self._call(mark, "mark_delivered", write=True)

    async def mark_retry(self, event_id: str, target: str, next_at: float, error: str) -> None:
        """One more failed attempt; try again at ``next_at`` (Unix seconds)."""

        def mark(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE deliveries SET attempts=attempts+1, last_attempt_at=?, "
                "next_attempt_at=?, last_error=? WHERE event_id=? AND target=? "
                "AND state='pending'",
                (time.time(), next_at, error, event_id, target),
            )

        await self._call(mark, "mark_retry", write=True)

    async def mark_dead(self, event_id: str, target: str, reason: str) -> None:
        """Give up on ``event_id`` for ``target`` (a dead letter, see :meth:`redrive`)."""

        def mark(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE deliveries SET state='dead', attempts=attempts+1, last_attempt_at=?, "
                "last_error=? WHERE event_id=? AND target=?",
                (time.time(), reason, event_id, target),
            )

        await self._call(mark, "mark_dead", write=True)

    async def redrive(
        self, event_ids: Iterable[str] | None = None, target: str | None = None
    ) -> int:
        """Dead letters back to pending, due now, attempts reset (``event_ids`` None: all;
        ``target`` None: every target). Returns how many deliveries were re-driven."""
        ids = None if event_ids is None else list(dict.fromkeys(event_ids))

        def redrive(conn: sqlite3.Connection) -> int:
            sql = (
                "UPDATE deliveries SET state='pending', attempts=0, next_attempt_at=? "
                "WHERE state='dead'"
            )
            args: list[Any] = [time.time()]
            if target is not None:
                sql += " AND target=?"
                args.append(target)
            if ids is None:
                return conn.execute(sql, args).rowcount
            count = 0
            for event_id in ids:
                count += conn.execute(sql + " AND event_id=?", [*args, event_id]).rowcount
            return count

        return await self._call(redrive, "redrive", write=True)

    async def prune(self, delivered_older_than: float) -> int:
        """Forget deliveries delivered more than ``delivered_older_than`` seconds ago, and
        events with no delivery left. Pending and dead ones are kept. Returns the number
        of events removed."""

        def prune(conn: sqlite3.Connection) -> int:
            cutoff = time.time() - delivered_older_than
            conn.execute(
                "DELETE FROM deliveries WHERE state='delivered' AND delivered_at < ?", (cutoff,)
            )
            return conn.execute(
                "DELETE FROM events WHERE NOT EXISTS "
                "(SELECT 1 FROM deliveries d WHERE d.event_id = events.event_id)"
            ).rowcount

        return await self._call(prune, "prune", write=True)

    # ------------------------------------------------------------------ reads

    async def next_batch(
        self,
        target: str,
        limit: int,
        *,
        exclude_cameras: Collection[str] = (),
        with_crop: bool = False,
    ) -> list[PendingDelivery]:
        """Up to ``limit`` deliveries due now for ``target``: the oldest pending event of
        each camera (never a later one while an earlier one of that camera is pending),
        oldest first, skipping ``exclude_cameras`` (those with a POST in flight)."""
        excluded = tuple(exclude_cameras)

        def query(conn: sqlite3.Connection) -> list[PendingDelivery]:
            crop = "e.crop" if with_crop else "NULL"
            rows = conn.execute(
                f"""
                WITH heads AS (
                    SELECT MIN(seq) AS seq FROM deliveries
                    WHERE target = ? AND state = 'pending' GROUP BY camera
                )
                SELECT d.event_id, d.camera, d.seq, e.created_at, d.attempts, e.payload, {crop}
                FROM heads h
                JOIN deliveries d ON d.target = ? AND d.seq = h.seq
                JOIN events e ON e.seq = d.seq
                WHERE d.next_attempt_at <= ?
                  AND d.camera NOT IN (SELECT value FROM json_each(?))
                ORDER BY d.seq
                LIMIT ?
                """,
                (target, target, time.time(), json.dumps(excluded), limit),
            ).fetchall()
            return [
                PendingDelivery(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6]) for r in rows
            ]

        return await self._call(query, "next_batch")

    async def next_due(self, target: str, *, exclude_cameras: Collection[str] = ()) -> float | None:
        """When the earliest camera head of ``target`` (outside ``exclude_cameras``) is due
        (Unix seconds), or None when nothing is pending."""
        excluded = json.dumps(tuple(exclude_cameras))

        def query(conn: sqlite3.Connection) -> float | None:
            row = conn.execute(
                """
                WITH heads AS (
                    SELECT MIN(seq) AS seq FROM deliveries
                    WHERE target = ? AND state = 'pending' GROUP BY camera
                )
                SELECT MIN(d.next_attempt_at) FROM heads h
                JOIN deliveries d ON d.target = ? AND d.seq = h.seq
                WHERE d.camera NOT IN (SELECT value FROM json_each(?))
                """,
                (target, target, excluded),
            ).fetchone()
            return None if row is None or row[0] is None else float(row[0])

        return await self._call(query, "next_due")

    async def stats(self, target: str) -> OutboxStats:
        """Depth (pending deliveries), age of the oldest pending event, dead letters."""

        def query(conn: sqlite3.Connection) -> OutboxStats:
            pending, oldest = conn.execute(
                "SELECT COUNT(*), MIN(e.created_at) FROM deliveries d "
                "JOIN events e ON e.seq = d.seq WHERE d.target = ? AND d.state = 'pending'",
                (target,),
            ).fetchone()
            (dead,) = conn.execute(
                "SELECT COUNT(*) FROM deliveries WHERE target = ? AND state = 'dead'", (target,)
            ).fetchone()
            age = 0.0 if oldest is None else max(0.0, time.time() - oldest)
            return OutboxStats(int(pending), age, int(dead))

        return await self._call(query, "stats")

    async def dead_letters(self, target: str | None = None) -> list[DeadLetter]:
        """Dead letters, oldest first (``target`` None: of every target)."""

        def query(conn: sqlite3.Connection) -> list[DeadLetter]:
            sql = (
                "SELECT d.event_id, d.target, d.camera, json_extract(e.payload, '$.text'), "
                "e.created_at, d.attempts, d.last_attempt_at, d.last_error "
                "FROM deliveries d JOIN events e ON e.seq = d.seq WHERE d.state = 'dead'"
            )
            args: tuple[str, ...] = ()
            if target is not None:
                sql += " AND d.target = ?"
                args = (target,)
            rows = conn.execute(sql + " ORDER BY d.seq, d.target", args).fetchall()
            return [DeadLetter(*r[:7], reason=r[7] or "") for r in rows]

        return await self._call(query, "dead_letters")

    async def crop(self, event_id: str) -> bytes | None:
        """The plate crop JPEG of an event still in the outbox, else None."""

        def query(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute("SELECT crop FROM events WHERE event_id = ?", (event_id,)).fetchone()
            return None if row is None else bytes(row[0])

        return await self._call(query, "crop")

    async def state(self, event_id: str, target: str) -> str | None:
        """``pending``, ``delivered`` or ``dead`` (None: not in the outbox)."""

        def query(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(
                "SELECT state FROM deliveries WHERE event_id = ? AND target = ?",
                (event_id, target),
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._call(query, "state")

    async def orphaned_targets(self) -> dict[str, int]:
        """Targets no longer configured that still have pending deliveries, with counts."""

        def query(conn: sqlite3.Connection) -> dict[str, int]:
            rows = conn.execute(
                "SELECT target, COUNT(*) FROM deliveries WHERE state = 'pending' "
                "GROUP BY target ORDER BY target"
            ).fetchall()
            return {str(t): int(n) for t, n in rows if t not in self.targets}

        return await self._call(query, "orphaned_targets")
