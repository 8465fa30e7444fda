"""At most one replica runs a camera: a lease per camera, a row with an expiry in PostgreSQL.

Sharding (streamer/foundation/shards.py) gives every camera one owner for a given number of
replicas, but while that number changes (replicas restarted one by one with the new
``--shard I/N``) an old replica and a new one may both think a camera is theirs; two
replicas may run one config on purpose (a standby); and a replica can die or freeze (a
lost host, a partition, SIGSTOP) while it holds cameras. With the history on PostgreSQL
the replicas share a database, so each replica given ``--shard`` (``0/1`` too) takes a
camera's lease before it starts the camera and keeps it while the camera runs.

A lease is a row of ``lpr_camera_leases``: the camera, its holder (this process: host, pid
and a random part), a fencing token (``lpr_lease_token``, a sequence: every take gets a
larger one) and an expiry in the server's clock, ``storage.lease_ttl_s`` (15 s) after the
last renewal. A replica renews all its leases in one statement every ``ttl / 5``; another
may take a camera only once its row has expired. So a replica that dies, is cut off or
freezes loses its cameras within the TTL, whatever TCP does (a frozen process keeps its
connection alive at the kernel, and a partitioned server keeps a session for hours).

A holder is a replica's host and outbox: only one process at a time may hold an outbox,
so a replica restarted on its own (after ``kill -9``, say) takes its leases back at once,
while a replacement elsewhere waits for the TTL.

The holder's side of it: a lease is valid here until ``2/3`` of the TTL after the last
renewal that succeeded was *sent* (:meth:`CameraLeases.valid`, on :func:`lease_clock`, which
runs on while the process is stopped and, on Linux, while the host is suspended). Past that,
the camera is stopped and nothing it decides is published (streamer/delivery/publisher.py
asks ``LeaseGate.may_publish``): a replica frozen past its lease and then continued
publishes nothing before it notices, because its own deadline passed a third of the TTL
before the server's.

Fencing: every take starts a *term*, a row of ``lpr_lease_terms`` (camera, token, holder,
when it started in the server's clock). Each event a leased replica publishes carries its
camera's token and when it was decided (``PlateEvent.lease``), and the history refuses an
event whose camera had a newer term that started before the event was decided
(streamer/store/postgresql.py): a stale holder's late events, whatever went wrong in it.
An event decided within its lease was decided at least a third of the TTL before any
newer term could start, so it is kept however late it arrives (the history down, say), as
long as the replicas' clocks and the server's agree within that third (5 s at the default
TTL; NTP keeps them within milliseconds). Terms are kept ``TERMS_KEPT_DAYS``.

Rows hold no session state, so a transaction-pooling proxy (PgBouncer) in front of the
database does not break them, as it broke the session advisory locks this replaced.

Every replica on a PostgreSQL history (leases or not) also says which cameras it runs, in
``lpr_camera_runs`` (camera, holder, when last seen), at every renewal; a camera another
replica was seen running within two renewals is run twice (two replicas without
``--shard`` on one history, a lease table changed by hand): an ERROR,
``lpr_camera_double_run``, and a readiness problem until it stops. No library does leases
on asyncpg; they are a few SQL statements.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from pathlib import Path

import asyncpg

LOG = logging.getLogger(__name__)

#: Seconds to connect.
CONNECT_TIMEOUT_S = 10.0
#: A lease is renewed every TTL / RENEWALS_PER_TTL...
RENEWALS_PER_TTL = 5
#: ...and is valid here until this share of the TTL after the last renewal sent.
VALID_SHARE = 2 / 3
#: A camera seen on another replica within this many renewals is run twice.
DOUBLE_RUN_RENEWALS = 2
#: Lease terms are kept this long: an event delayed longer is no longer checked against them.
TERMS_KEPT_DAYS = 30
#: The clock of a lease's validity here: it runs on while the host is suspended (Linux's
#: CLOCK_BOOTTIME; CLOCK_MONOTONIC stops then, and would keep a lease valid over a sleep).
_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)

SCHEMA = """
CREATE SEQUENCE IF NOT EXISTS lpr_lease_token;
CREATE TABLE IF NOT EXISTS lpr_camera_leases (
    camera text PRIMARY KEY,
    holder text NOT NULL,
    token bigint NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS lpr_lease_terms (
    token bigint PRIMARY KEY,
    camera text NOT NULL,
    holder text NOT NULL,
    started_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS lpr_lease_terms_by_camera ON lpr_lease_terms (camera, token);
CREATE TABLE IF NOT EXISTS lpr_camera_runs (
    camera text NOT NULL,
    holder text NOT NULL,
    seen_at timestamptz NOT NULL,
    PRIMARY KEY (camera, holder)
);
"""
#: Take a free or expired lease (or this holder's own), starting a term: its new token,
#: else nothing.
TAKE = """
WITH taken AS (
    INSERT INTO lpr_camera_leases AS l (camera, holder, token, expires_at)
    VALUES ($1, $2, nextval('lpr_lease_token'), now() + make_interval(secs => $3))
    ON CONFLICT (camera) DO UPDATE
        SET holder = EXCLUDED.holder, token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
        WHERE l.expires_at < now() OR l.holder = EXCLUDED.holder
    RETURNING camera, holder, token
), term AS (
    INSERT INTO lpr_lease_terms (token, camera, holder, started_at)
    SELECT token, camera, holder, now() FROM taken
)
SELECT token FROM taken
"""
PRUNE_TERMS = "DELETE FROM lpr_lease_terms WHERE started_at < now() - make_interval(days => $1)"
#: Renew this holder's leases: the cameras still held (a missing one was taken over).
RENEW = """
UPDATE lpr_camera_leases SET expires_at = now() + make_interval(secs => $3)
WHERE holder = $1 AND camera = ANY($2::text[]) AND expires_at >= now()
RETURNING camera
"""
RELEASE = "DELETE FROM lpr_camera_leases WHERE camera = $1 AND holder = $2"
#: This holder runs these cameras now; forget its old rows and anyone's stale ones.
SEEN = """
WITH gone AS (
    DELETE FROM lpr_camera_runs
    WHERE (holder = $1 AND NOT camera = ANY($2::text[]))
       OR seen_at < now() - make_interval(secs => $3 * 10)
)
INSERT INTO lpr_camera_runs (camera, holder, seen_at)
SELECT unnest($2::text[]), $1, now()
ON CONFLICT (camera, holder) DO UPDATE SET seen_at = EXCLUDED.seen_at
"""
#: The cameras of ``$2`` another holder was seen running within ``$3`` seconds.
OTHERS = """
SELECT camera, holder FROM lpr_camera_runs
WHERE camera = ANY($2::text[]) AND holder <> $1 AND seen_at >= now() - make_interval(secs => $3)
"""


def holder_id(outbox: Path | None = None) -> str:
    """This replica among the others: its host and its outbox (one process at a time may
    hold an outbox, so a replica restarted on it takes its own leases back at once, as after
    a ``kill -9``); without an outbox, its host, pid and a random part."""
    if outbox is not None:
        return f"{socket.gethostname()}:{outbox.resolve()}"
    return f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(3)}"


def lease_clock() -> float:
    """Seconds on the clock leases are valid by here (see ``_CLOCK``)."""
    return time.clock_gettime(_CLOCK)


class LeaseError(Exception):
    """The lease database cannot be reached or answer in time."""


class CameraLeases:
    """This replica's camera leases and its running cameras, on one connection of its own
    to ``dsn`` (see the module docstring)."""

    def __init__(self, dsn: str, where: str, ttl_s: float, holder: str | None = None) -> None:
        self._dsn = dsn
        self.where = where  # the database, redacted (for logs and errors)
        self.ttl_s = ttl_s
        self.holder = holder or holder_id()
        self._connection: asyncpg.Connection | None = None
        #: Leases held: camera -> (fencing token, :func:`lease_clock` time until which it is
        #: valid here).
        self.held: dict[str, tuple[int, float]] = {}
        self._lock = asyncio.Lock()  # one statement at a time on the connection

    @property
    def renew_every_s(self) -> float:
        return self.ttl_s / RENEWALS_PER_TTL

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.is_closed()

    def valid(self, camera: str) -> bool:
        """Whether this replica may run ``camera`` now (see the module docstring)."""
        lease = self.held.get(camera)
        return lease is not None and lease_clock() < lease[1]

    def token(self, camera: str) -> int | None:
        lease = self.held.get(camera)
        return lease[0] if lease is not None else None

    async def connect(self) -> None:
        """Connect (again), creating the tables if needed; the leases held stay held until
        their deadlines (rows outlive connections)."""
        await self._drop()
        try:
            connection = await asyncpg.connect(
                self._dsn, timeout=CONNECT_TIMEOUT_S, command_timeout=self.renew_every_s
            )
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            raise LeaseError(f"camera leases: cannot reach {self.where}: {exc}") from None
        self._connection = connection
        try:
            async with connection.transaction():
                await connection.execute("SELECT pg_advisory_xact_lock(hashtext('lpr_leases'))")
                await connection.execute(SCHEMA)
                await connection.execute(PRUNE_TERMS, TERMS_KEPT_DAYS)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            await self._drop()
            raise LeaseError(f"camera leases: cannot set up {self.where}: {exc}") from None

    async def take(self, camera: str) -> bool:
        """Take ``camera``'s lease if no other replica holds it; True if this one now does."""
        if self.valid(camera):
            return True
        sent = lease_clock()
        token = await self._query("fetchval", TAKE, camera, self.holder, self.ttl_s)
        if token is None:
            return False
        self.held[camera] = (int(token), sent + VALID_SHARE * self.ttl_s)
        return True

    async def renew(self) -> set[str]:
        """Renew every lease held; returns the cameras whose lease is gone (taken over
        after it expired). Raises :class:`LeaseError` when the database does not answer:
        the leases then stay valid here until their deadlines, no longer."""
        if not self.held:
            return set()
        sent = lease_clock()
        rows = await self._query("fetch", RENEW, self.holder, list(self.held), self.ttl_s)
        kept = {row["camera"] for row in rows}
        lost = set(self.held) - kept
        for camera in lost:
            del self.held[camera]
        for camera in kept:
            self.held[camera] = (self.held[camera][0], sent + VALID_SHARE * self.ttl_s)
        return lost

    async def release(self, camera: str) -> None:
        """Let ``camera`` go (it stopped here)."""
        if self.held.pop(camera, None) is None:
            return
        with contextlib.suppress(LeaseError):  # it expires on its own
            await self._query("execute", RELEASE, camera, self.holder)

    async def seen_running(self, cameras: list[str]) -> dict[str, str]:
        """Say that this replica runs ``cameras``; returns those another replica was seen
        running lately: camera -> the other holder."""
        await self._query("execute", SEEN, self.holder, cameras, self.ttl_s)
        window = DOUBLE_RUN_RENEWALS * self.renew_every_s + 1.0
        rows = await self._query("fetch", OTHERS, self.holder, cameras, window)
        return {row["camera"]: row["holder"] for row in rows}

    async def close(self) -> None:
        """Let every camera go (after they stopped)."""
        for camera in list(self.held):
            await self.release(camera)
        if self.connected:
            with contextlib.suppress(LeaseError):
                await self._query("execute", SEEN, self.holder, [], self.ttl_s)
        await self._drop()

    async def _query(self, how: str, sql: str, *args: object) -> object:
        if not self.connected:
            raise LeaseError(f"camera leases: not connected to {self.where}")
        assert self._connection is not None
        async with self._lock:
            try:
                return await getattr(self._connection, how)(sql, *args)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
                await self._drop()
                raise LeaseError(f"camera leases: lost {self.where}: {exc}") from None

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and not connection.is_closed():
            try:
                await asyncio.wait_for(connection.close(), CONNECT_TIMEOUT_S)
            except (OSError, asyncpg.PostgresError, TimeoutError):
                connection.terminate()
