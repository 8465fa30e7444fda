"""Opening a SQLite file the way the service keeps its state (the outbox, the history): the
folder made, WAL, no implicit transactions, foreign keys on, the schema created or checked."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

#: How long a statement waits for another connection's lock (another process, a CLI).
BUSY_TIMEOUT_S = 5.0


def open_wal(
    path: Path,
    *,
    synchronous: str,
    schema: str,
    version: int,
    too_new: Callable[[int], Exception],
    pragmas: Sequence[str] = (),
    migrations: Mapping[int, str] | None = None,
) -> sqlite3.Connection:
    """A connection to ``path`` in WAL mode with ``synchronous`` (``FULL``, ``NORMAL``) and
    ``pragmas`` set, ``schema`` created and ``user_version`` set to ``version``. A file of an
    older schema is brought up to date first by ``migrations`` (version -> the statements
    that make a file of that version the next one; a version with none needs only
    ``schema``). A file of a newer schema raises ``too_new(its version)``; what SQLite
    refuses raises ``sqlite3.Error`` (a folder that cannot be made:
    ``sqlite3.OperationalError``)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise sqlite3.OperationalError(
            f"cannot create the folder {path.parent}: {exc.strerror}"
        ) from exc
    # isolation_level=None: no implicit transactions; writes use BEGIN IMMEDIATE.
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"cannot switch {path} to WAL (got {mode})")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
        for pragma in pragmas:
            conn.execute(f"PRAGMA {pragma}")
        found = conn.execute("PRAGMA user_version").fetchone()[0]
        if found > version:
            raise too_new(found)
        steps = ""
        if found and migrations:
            steps = "".join(migrations.get(v, "") for v in range(found, version))
        conn.executescript(f"BEGIN IMMEDIATE;{steps}{schema}PRAGMA user_version={version};COMMIT;")
    except BaseException:
        conn.close()
        raise
    return conn
