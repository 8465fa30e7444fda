"""The durable event log (the outbox): every decision is committed here first, and every
consumer of events (the history, ``events.stdout`` and ``events.file``, each webhook
target, the MQTT broker) reads it from here at its own pace (docs/events.md, "The event
log").

One SQLite file in WAL mode holds three tables:

* ``events``: one row per event message (``event_id`` unique: the message id,
  ``PlateEvent.message_id``, which is the event id for a pass's first report and
  ``<event_id>.v<version>`` for a correction; ``seq`` the order it was
  added in, camera, ``created_at``, the JSON payload without the crop, the crop
  JPEG and the vehicle picture as BLOBs, kept so a consumer can send or store them);
* ``deliveries``: one row per event and consumer (``target``; primary key ``(event_id,
  target)``), ``state`` ``pending`` | ``delivered`` | ``dead``, attempts, the
  time of the next attempt, the last error, when it was delivered. ``seq`` and
  ``camera`` are repeated here so that "the oldest pending event of each camera"
  is one indexed query;
* ``erased``: the passes an erasure took out, by id (streamer/store/erasure.py).

One process owns the file (streamer/foundation/file_owner.py: a lock on ``<file>.lock``): a second
service on the same outbox refuses to start; the CLI reads and re-drives beside it.

:meth:`Outbox.add` is the durability point: it returns once the event and a
pending delivery per target are committed (``synchronous=FULL``). A delivery
leaves ``pending`` only by :meth:`Outbox.mark_delivered` or
:meth:`Outbox.mark_dead`; a crash in between leaves it pending, so it is sent
again after a restart with the same ``webhook-id`` (at-least-once delivery,
deduplicated by the receiver).

Threading: the one ``sqlite3`` connection lives in one dedicated worker thread
(an executor with a single worker); every public method is a coroutine that
runs its statement (streamer/delivery/outbox_sql.py: the schema, the statements and
the rows they give) there, so the event loop never waits on the disk, and jobs
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
import functools
import json
import logging
import os
import sqlite3
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from streamer.delivery import outbox_sql as sql
from streamer.delivery.events import PlateEvent
from streamer.delivery.outbox_sql import (
    MIGRATIONS,
    SCHEMA,
    SCHEMA_VERSION,
    DeadLetter,
    OutboxStats,
    PendingDelivery,
)
from streamer.foundation.file_owner import FileInUseError, lock_path, take_ownership
from streamer.foundation.metrics import Metrics
from streamer.foundation.sqlite_file import open_wal

LOG = logging.getLogger(__name__)
T = TypeVar("T")


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path``, None when there is none."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


#: Events one transaction of an erasure deletes (a large erasure runs in such batches, so
#: that the log's writes wait for one batch at most).
ERASE_BATCH = 500


class OutboxError(Exception):
    """The outbox database failed (disk full, I/O error, read-only, missing file, ...)."""


class OutboxInUseError(OutboxError):
    """Another process owns the outbox (its lock file is held)."""


class Outbox:
    """The SQLite outbox. Open with ``await Outbox.open(path, targets)``; every method is
    a coroutine run on the outbox's own database thread."""

    def __init__(self, path: Path, targets: Sequence[str], metrics: Metrics | None = None) -> None:
        """Use :meth:`open`; this only sets the object up."""
        if len(set(targets)) != len(targets):
            raise ValueError(f"target names must be unique, got {list(targets)}")
        self.path = Path(path)
        #: The consumers an event added gets a pending delivery for (a reload changes them).
        self.targets: tuple[str, ...] = tuple(targets)
        #: Those of them that take the vehicle picture (the history): once they have it, the
        #: log lets it go.
        self.frame_targets: tuple[str, ...] = ()
        #: The targets that take withheld passes (``plate.withheld``): the history, webhook
        #: targets that ask for them. Set by the consumers, like :attr:`targets`.
        self.withheld_targets: tuple[str, ...] = ()
        self._metrics = metrics
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="outbox-db")
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._healthy = True
        self._file_id: tuple[int, int] | None = None  # the file opened: (device, inode)
        self._last_error: str | None = None
        self._lock_fd: int | None = None  # the owner's lock (``open(owner=True)``)

    # ------------------------------------------------------------------ life cycle

    @classmethod
    async def open(
        cls,
        path: Path | str,
        targets: Sequence[str],
        *,
        metrics: Metrics | None = None,
        create: bool = True,
        owner: bool = False,
    ) -> Outbox:
        """Open (``create``: or create, with its folder) the outbox at ``path``; with
        ``owner``, as the one service that writes it (:func:`take_ownership`; the CLI's
        readers and re-drives need not be).

        Raises :class:`OutboxError` when the file cannot be opened or set up,
        :class:`OutboxInUseError` when ``owner`` and another process owns it.
        """
        outbox = cls(Path(path), targets, metrics)
        try:
            if owner:
                await outbox._take_ownership()
            await outbox._call(lambda _: None, "open", connect=create, must_exist=not create)
        except BaseException:
            outbox._executor.shutdown(wait=False)
            raise
        return outbox

    def _connect(self, must_exist: bool) -> sqlite3.Connection:
        if must_exist and not self.path.is_file():
            raise OutboxError(f"no outbox at {self.path}")
        # FULL: a commit is on disk (WAL fsynced) before add() returns, so an accepted event
        # survives a power cut too, not only a crash of the process (NORMAL would). The cost,
        # one fsync per event or delivery, is nothing at one event per vehicle pass.
        return open_wal(
            self.path,
            synchronous="FULL",
            schema=SCHEMA,
            version=SCHEMA_VERSION,
            too_new=lambda found: OutboxError(
                f"{self.path} has outbox schema {found}, newer than this version "
                f"understands ({SCHEMA_VERSION})"
            ),
            migrations=MIGRATIONS,
        )

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
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

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

    async def _take_ownership(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self._lock_fd = await loop.run_in_executor(self._executor, take_ownership, self.path)
        except FileInUseError as exc:
            raise OutboxInUseError(
                f"outbox {self.path} is in use by another service ({exc.holder}): one service "
                "per outbox; give each its own outbox.path"
            ) from None
        except OSError as exc:
            raise OutboxError(f"cannot lock {lock_path(self.path)}: {exc}") from exc

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
        (the durability point). False when the event id was already there, or its pass was
        erased (:meth:`is_erased`; nothing done). A withheld pass gets a delivery for each of
        :attr:`withheld_targets` only; when there are none it is not kept (True: nothing to
        deliver, nothing lost).
        """
        if not self.targets:
            raise ValueError("the outbox was opened without targets: nothing to deliver to")
        targets = self.targets if event.withheld is None else self.withheld_targets
        if not targets:
            return True
        payload = json.dumps(event.to_dict(include_crop=False), ensure_ascii=False)
        add = functools.partial(
            sql.add,
            event_id=event.message_id,
            camera=event.camera,
            payload=payload,
            crop=bytes(event.crop_jpeg),
            targets=targets,
            frame=bytes(event.frame_jpeg) if event.frame_jpeg is not None else None,
        )
        return await self._call(add, "add", write=True)

    async def mark_delivered(self, event_id: str, target: str) -> None:
        """Delivered to ``target`` (the vehicle picture let go once every one of
        :attr:`frame_targets` has it)."""
        mark = functools.partial(
            sql.mark_delivered,
            event_id=event_id,
            target=target,
            frame_targets=self.frame_targets,
        )
        await self._call(mark, "mark_delivered", write=True)

    async def mark_retry(self, event_id: str, target: str, next_at: float, error: str) -> None:
        """One more failed attempt; try again at ``next_at`` (Unix seconds)."""
        mark = functools.partial(
            sql.mark_retry, event_id=event_id, target=target, next_at=next_at, error=error
        )
        await self._call(mark, "mark_retry", write=True)

    async def due_now(self, target: str) -> int:
        """The pending deliveries of ``target`` due now, whatever their backoff (a target
        that is reachable again); returns how many were waiting."""
        return await self._call(
            functools.partial(sql.due_now, target=target), "due_now", write=True
        )

    async def mark_dead(self, event_id: str, target: str, reason: str) -> None:
        """Give up on ``event_id`` for ``target`` (a dead letter, see :meth:`redrive`)."""
        mark = functools.partial(sql.mark_dead, event_id=event_id, target=target, reason=reason)
        await self._call(mark, "mark_dead", write=True)

    async def redrive(
        self, event_ids: Iterable[str] | None = None, target: str | None = None
    ) -> int:
        """Dead letters back to pending, due now, attempts reset (``event_ids`` None: all;
        ``target`` None: every target). Returns how many deliveries were re-driven."""
        ids = None if event_ids is None else list(dict.fromkeys(event_ids))
        redrive = functools.partial(sql.redrive, ids=ids, target=target)
        return await self._call(redrive, "redrive", write=True)

    async def prune(
        self, delivered_older_than: float, dead_older_than: float = float("inf")
    ) -> int:
        """Forget deliveries delivered more than ``delivered_older_than`` seconds ago, dead
        letters older than ``dead_older_than``, and events with no delivery left. Pending
        ones are kept. Returns the number of events removed."""
        prune = functools.partial(
            sql.prune,
            delivered_older_than=delivered_older_than,
            dead_older_than=min(dead_older_than, 1e12),
        )
        return await self._call(prune, "prune", write=True)

    async def erase(
        self,
        needle: str,
        *,
        batch: int = ERASE_BATCH,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[int, set[str]]:
        """Forget every event whose payload holds ``needle`` (a plate or a pass id,
        JSON-quoted) with all its deliveries, pending, delivered or dead, of any target
        (removed ones too), leaving no trace in the file; the passes are recorded as erased.
        Runs in transactions of ``batch`` events (``progress`` gets the count so far after
        each). ``(events removed, their pass ids)``."""
        removed, passes = 0, set[str]()
        while True:
            erase = functools.partial(sql.erase_batch, needle=needle, limit=batch)
            count, ids = await self._call(erase, "erase", write=True)
            removed += count
            passes.update(ids)
            if progress is not None and count:
                progress(removed)
            if count < batch:
                break
        # fetchall: a checkpoint's cursor left unread keeps its statement open, and the next
        # write's COMMIT fails ("SQL statements in progress").
        await self._call(
            lambda conn: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall(), "erase"
        )
        return removed, passes

    async def record_erased(self, pass_ids: Iterable[str]) -> None:
        """Remember these passes as erased (a pass that was still open, or queued)."""
        ids = sorted(set(pass_ids))
        if ids:
            record = functools.partial(sql.record_erased, pass_ids=ids)
            await self._call(record, "record_erased", write=True)

    async def is_erased(self, pass_id: str) -> bool:
        """Whether the pass ``pass_id`` was erased (its events are refused by :meth:`add`)."""
        return await self._call(functools.partial(sql.is_erased, pass_id=pass_id), "is_erased")

    async def erased(self) -> set[str]:
        """Every pass recorded as erased (within the retention)."""
        return await self._call(sql.erased, "erased")

    async def trim_pending(self, target: str, max_pending: int, reason: str) -> int:
        """Dead-letter the oldest pending deliveries of ``target`` beyond ``max_pending``
        (re-drivable, with ``reason``); how many."""
        trim = functools.partial(
            sql.trim_pending, target=target, max_pending=max_pending, reason=reason
        )
        return await self._call(trim, "trim_pending", write=True)

    # ------------------------------------------------------------------ reads

    async def next_batch(
        self,
        target: str,
        limit: int,
        *,
        exclude_cameras: Collection[str] = (),
        with_crop: bool = False,
        with_frame: bool = False,
    ) -> list[PendingDelivery]:
        """Up to ``limit`` deliveries due now for ``target``: the oldest pending event of
        each camera (never a later one while an earlier one of that camera is pending),
        oldest first, skipping ``exclude_cameras`` (those with a POST in flight)."""
        query = functools.partial(
            sql.next_batch,
            target=target,
            limit=limit,
            excluded=tuple(exclude_cameras),
            with_crop=with_crop,
            with_frame=with_frame,
        )
        return await self._call(query, "next_batch")

    async def next_due(self, target: str, *, exclude_cameras: Collection[str] = ()) -> float | None:
        """When the earliest camera head of ``target`` (outside ``exclude_cameras``) is due
        (Unix seconds), or None when nothing is pending."""
        query = functools.partial(sql.next_due, target=target, excluded=tuple(exclude_cameras))
        return await self._call(query, "next_due")

    async def stats(self, target: str) -> OutboxStats:
        """Depth (pending deliveries), age of the oldest pending event, dead letters."""
        return await self._call(functools.partial(sql.stats, target=target), "stats")

    async def dead_letters(self, target: str | None = None) -> list[DeadLetter]:
        """Dead letters, oldest first (``target`` None: of every target)."""
        query = functools.partial(sql.dead_letters, target=target)
        return await self._call(query, "dead_letters")

    async def crop(self, event_id: str) -> bytes | None:
        """The plate crop JPEG of an event still in the outbox, else None."""
        return await self._call(functools.partial(sql.crop, event_id=event_id), "crop")

    async def state(self, event_id: str, target: str) -> str | None:
        """``pending``, ``delivered`` or ``dead`` (None: not in the outbox)."""
        query = functools.partial(sql.state, event_id=event_id, target=target)
        return await self._call(query, "state")

    async def orphaned_targets(self) -> dict[str, int]:
        """Targets no longer configured that still have pending deliveries, with counts."""
        pending = await self._call(sql.pending_by_target, "orphaned_targets")
        return {name: count for name, count in pending.items() if name not in self.targets}
