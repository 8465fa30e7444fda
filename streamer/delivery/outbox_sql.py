"""The outbox's tables and statements: plain functions of a ``sqlite3`` connection.

:class:`~streamer.delivery.outbox.Outbox` runs each of these on its database thread
(writes inside ``BEGIN IMMEDIATE`` ... ``COMMIT``) and turns their database errors into
:class:`~streamer.delivery.outbox.OutboxError`; here is only what is stored and how it
is read: the schema (:data:`SCHEMA`, version :data:`SCHEMA_VERSION`), the rows a caller
gets (:class:`PendingDelivery`, :class:`DeadLetter`, :class:`OutboxStats`) and one
function per statement. The tables are described in streamer/delivery/outbox.py.

Times are wall-clock Unix seconds (``time.time()``), read here when a statement runs.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SCHEMA_VERSION = 2
#: What makes a file of an older schema the next one (streamer/foundation/sqlite_file.py).
MIGRATIONS = {
    # 2: the vehicle picture beside the crop (the history is a consumer of the log now).
    1: "ALTER TABLE events ADD COLUMN frame BLOB;",
}

PENDING, DELIVERED, DEAD = "pending", "delivered", "dead"

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,  -- insertion order (stable across VACUUM)
    event_id   TEXT    NOT NULL UNIQUE,
    camera     TEXT    NOT NULL,
    created_at REAL    NOT NULL,
    payload    TEXT    NOT NULL,                    -- PlateEvent.to_dict(include_crop=False)
    crop       BLOB    NOT NULL,
    frame      BLOB                                 -- the vehicle picture (None: not made)
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
-- Passes erased (by event id, never by plate: an id is no personal data): a correction or a
-- queued version of one is not published again, and a broker's retained copy is cleared.
CREATE TABLE IF NOT EXISTS erased (
    event_id  TEXT PRIMARY KEY,
    erased_at REAL NOT NULL
);
"""


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
    #: The vehicle picture when asked for (``with_frame=True``) and made, else None.
    frame: bytes | None = None


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


# --------------------------------------------------------------------------- writes


def add(
    conn: sqlite3.Connection,
    event_id: str,
    camera: str,
    payload: str,
    crop: bytes,
    targets: Sequence[str],
    frame: bytes | None = None,
) -> bool:
    """The event and a pending delivery per target, due now; False when ``event_id``
    was already there or its pass was erased (nothing done)."""
    now = time.time()
    pass_id = event_id.split(".v", 1)[0]  # (a correction's message id: <event_id>.v<n>)
    if conn.execute("SELECT 1 FROM erased WHERE event_id = ?", (pass_id,)).fetchone():
        return False
    cursor = conn.execute(
        "INSERT OR IGNORE INTO events (event_id, camera, created_at, payload, crop, frame) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (event_id, camera, now, payload, crop, frame),
    )
    if cursor.rowcount == 0:
        return False
    seq = cursor.lastrowid
    conn.executemany(
        "INSERT INTO deliveries (event_id, target, seq, camera, state, next_attempt_at) "
        "VALUES (?, ?, ?, ?, 'pending', ?)",
        [(event_id, target, seq, camera, now) for target in targets],
    )
    return True


def mark_delivered(
    conn: sqlite3.Connection, event_id: str, target: str, frame_targets: Sequence[str] = ()
) -> None:
    """Delivered to ``target``; when it is one of ``frame_targets`` (those that take the
    vehicle picture: the history) and none of them still waits, the picture is let go: the
    log keeps the crop only, as receivers' ``crop_url`` needs it."""
    now = time.time()
    conn.execute(
        "UPDATE deliveries SET state='delivered', attempts=attempts+1, "
        "last_attempt_at=?, delivered_at=?, last_error=NULL "
        "WHERE event_id=? AND target=?",
        (now, now, event_id, target),
    )
    if target in frame_targets:
        conn.execute(
            "UPDATE events SET frame = NULL WHERE event_id = ? AND frame IS NOT NULL "
            "AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = ? AND "
            "d.state = 'pending' AND d.target IN (SELECT value FROM json_each(?)))",
            (event_id, event_id, json.dumps(list(frame_targets))),
        )


def mark_retry(
    conn: sqlite3.Connection, event_id: str, target: str, next_at: float, error: str
) -> None:
    conn.execute(
        "UPDATE deliveries SET attempts=attempts+1, last_attempt_at=?, "
        "next_attempt_at=?, last_error=? WHERE event_id=? AND target=? "
        "AND state='pending'",
        (time.time(), next_at, error, event_id, target),
    )


def due_now(conn: sqlite3.Connection, target: str) -> int:
    """Every pending delivery of ``target`` waiting out a backoff due now; how many."""
    now = time.time()
    cursor = conn.execute(
        "UPDATE deliveries SET next_attempt_at=? WHERE target=? AND state='pending' "
        "AND next_attempt_at > ?",
        (now, target, now),
    )
    return cursor.rowcount


def mark_dead(conn: sqlite3.Connection, event_id: str, target: str, reason: str) -> None:
    conn.execute(
        "UPDATE deliveries SET state='dead', attempts=attempts+1, last_attempt_at=?, "
        "last_error=? WHERE event_id=? AND target=?",
        (time.time(), reason, event_id, target),
    )


def redrive(conn: sqlite3.Connection, ids: Sequence[str] | None, target: str | None) -> int:
    """Dead letters back to pending, due now, attempts reset; how many."""
    sql = "UPDATE deliveries SET state='pending', attempts=0, next_attempt_at=? WHERE state='dead'"
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


def prune(conn: sqlite3.Connection, delivered_older_than: float, dead_older_than: float) -> int:
    """Deliveries delivered longer ago than ``delivered_older_than`` seconds, and dead letters
    older than ``dead_older_than``, forgotten; then events with no delivery left, and erasure
    records as old as the delivered ones. The number of events removed."""
    now = time.time()
    conn.execute(
        "DELETE FROM deliveries WHERE state='delivered' AND delivered_at < ?",
        (now - delivered_older_than,),
    )
    conn.execute(
        "DELETE FROM deliveries WHERE state='dead' AND last_attempt_at < ?",
        (now - dead_older_than,),
    )
    conn.execute("DELETE FROM erased WHERE erased_at < ?", (now - delivered_older_than,))
    return conn.execute(
        "DELETE FROM events WHERE NOT EXISTS "
        "(SELECT 1 FROM deliveries d WHERE d.event_id = events.event_id)"
    ).rowcount


def erase_batch(conn: sqlite3.Connection, needle: str, limit: int) -> tuple[int, list[str]]:
    """Up to ``limit`` events whose payload holds ``needle`` (a plate or a pass id, JSON-quoted)
    deleted with every delivery of theirs, whatever its state or target (deleted pages
    overwritten), their passes recorded as erased; ``(events removed, their pass ids)``."""
    conn.execute("PRAGMA secure_delete=ON")
    rows = conn.execute(
        "SELECT seq, json_extract(payload, '$.event_id') FROM events "
        "WHERE instr(payload, ?) > 0 LIMIT ?",
        (needle, limit),
    ).fetchall()
    if not rows:
        return 0, []
    seqs = json.dumps([r[0] for r in rows])
    conn.execute("DELETE FROM deliveries WHERE seq IN (SELECT value FROM json_each(?))", (seqs,))
    removed = conn.execute(
        "DELETE FROM events WHERE seq IN (SELECT value FROM json_each(?))", (seqs,)
    ).rowcount
    passes = sorted({str(r[1]) for r in rows if r[1] is not None})
    record_erased(conn, passes)
    return removed, passes


def record_erased(conn: sqlite3.Connection, pass_ids: Sequence[str]) -> None:
    """Remember these passes as erased (now)."""
    now = time.time()
    conn.executemany(
        "INSERT OR REPLACE INTO erased (event_id, erased_at) VALUES (?, ?)",
        [(pass_id, now) for pass_id in pass_ids],
    )


def erased(conn: sqlite3.Connection) -> set[str]:
    """Every pass recorded as erased."""
    return {str(r[0]) for r in conn.execute("SELECT event_id FROM erased")}


def is_erased(conn: sqlite3.Connection, pass_id: str) -> bool:
    row = conn.execute("SELECT 1 FROM erased WHERE event_id = ?", (pass_id,)).fetchone()
    return row is not None


def trim_pending(conn: sqlite3.Connection, target: str, max_pending: int, reason: str) -> int:
    """The oldest pending deliveries of ``target`` beyond ``max_pending`` made dead letters
    with ``reason`` (re-drivable); how many."""
    (count,) = conn.execute(
        "SELECT COUNT(*) FROM deliveries WHERE target = ? AND state = 'pending'", (target,)
    ).fetchone()
    over = int(count) - max_pending
    if over <= 0:
        return 0
    return conn.execute(
        "UPDATE deliveries SET state='dead', last_attempt_at=?, last_error=? "
        "WHERE target = ? AND state = 'pending' AND seq IN (SELECT seq FROM deliveries "
        "WHERE target = ? AND state = 'pending' ORDER BY seq LIMIT ?)",
        (time.time(), reason, target, target, over),
    ).rowcount


# --------------------------------------------------------------------------- reads


def next_batch(
    conn: sqlite3.Connection,
    target: str,
    limit: int,
    excluded: Sequence[str],
    with_crop: bool,
    with_frame: bool = False,
) -> list[PendingDelivery]:
    """The oldest pending event of each camera not ``excluded``, if due, oldest first."""
    crop = "e.crop" if with_crop else "NULL"
    frame = "e.frame" if with_frame else "NULL"
    rows = conn.execute(
        f"""
        WITH heads AS (
            SELECT MIN(seq) AS seq FROM deliveries
            WHERE target = ? AND state = 'pending' GROUP BY camera
        )
        SELECT d.event_id, d.camera, d.seq, e.created_at, d.attempts, e.payload, {crop}, {frame}
        FROM heads h
        JOIN deliveries d ON d.target = ? AND d.seq = h.seq
        JOIN events e ON e.seq = d.seq
        WHERE d.next_attempt_at <= ?
          AND d.camera NOT IN (SELECT value FROM json_each(?))
        ORDER BY d.seq
        LIMIT ?
        """,
        (target, target, time.time(), json.dumps(tuple(excluded)), limit),
    ).fetchall()
    return [
        PendingDelivery(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6], r[7]) for r in rows
    ]


def next_due(conn: sqlite3.Connection, target: str, excluded: Sequence[str]) -> float | None:
    """When the earliest camera head not ``excluded`` is due; None: nothing pending."""
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
        (target, target, json.dumps(tuple(excluded))),
    ).fetchone()
    return None if row is None or row[0] is None else float(row[0])


def stats(conn: sqlite3.Connection, target: str) -> OutboxStats:
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


def dead_letters(conn: sqlite3.Connection, target: str | None) -> list[DeadLetter]:
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


def crop(conn: sqlite3.Connection, event_id: str) -> bytes | None:
    row = conn.execute("SELECT crop FROM events WHERE event_id = ?", (event_id,)).fetchone()
    return None if row is None else bytes(row[0])


def state(conn: sqlite3.Connection, event_id: str, target: str) -> str | None:
    row = conn.execute(
        "SELECT state FROM deliveries WHERE event_id = ? AND target = ?",
        (event_id, target),
    ).fetchone()
    return None if row is None else str(row[0])


def pending_by_target(conn: sqlite3.Connection) -> dict[str, int]:
    """Every target with pending deliveries, with their count."""
    rows = conn.execute(
        "SELECT target, COUNT(*) FROM deliveries WHERE state = 'pending' "
        "GROUP BY target ORDER BY target"
    ).fetchall()
    return {str(t): int(n) for t, n in rows}
