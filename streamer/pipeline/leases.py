"""At most one replica runs a camera: a lease per camera, a PostgreSQL advisory lock.

Sharding (streamer/pipeline/shards.py) gives every camera one owner for a given number of
replicas, but while that number changes (replicas restarted one by one with the new
``--shard I/N``) an old replica and a new one may both think a camera is theirs. With the
history on PostgreSQL the replicas share a database, so each takes a camera's lease before
it starts the camera and keeps it while the camera runs: a session-level advisory lock
(``pg_try_advisory_lock``) on a key hashed from the camera's name, on one connection of its
own. A camera whose lease another replica holds waits, and is started once that replica lets
it go (it stopped the camera, stopped, or died: PostgreSQL ends a dead client's session and
its locks with it).

Losing the connection loses every lease at once (the server ends the session), so the
replica stops all its leased cameras at once and takes their leases again once connected:
a camera is never run without its lease. No library wraps advisory locks for asyncpg; they
are two SQL functions.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from typing import TYPE_CHECKING

import asyncpg

if TYPE_CHECKING:
    from streamer.config import CameraConfig, Settings
    from streamer.pipeline.cameras import Cameras

LOG = logging.getLogger(__name__)

#: Seconds to connect, and for one statement.
CONNECT_TIMEOUT_S = 10.0
COMMAND_TIMEOUT_S = 10.0


def lease_key(camera: str) -> int:
    """The advisory lock key of ``camera``: a signed 64-bit hash of its name."""
    digest = hashlib.blake2b(f"lpr-camera\0{camera}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class LeaseError(Exception):
    """The lease database cannot be reached (every lease is lost)."""


class CameraLeases:
    """This replica's camera leases, on one connection of its own to ``dsn``."""

    def __init__(self, dsn: str, where: str) -> None:
        self._dsn = dsn
        self.where = where  # the database, redacted (for logs and errors)
        self._connection: asyncpg.Connection | None = None
        self.held: set[str] = set()
        self._lock = asyncio.Lock()  # one statement at a time on the connection

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.is_closed()

    async def connect(self) -> None:
        """Connect (again); any lease held before is gone."""
        await self._drop()
        try:
            self._connection = await asyncpg.connect(
                self._dsn, timeout=CONNECT_TIMEOUT_S, command_timeout=COMMAND_TIMEOUT_S
            )
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            raise LeaseError(f"camera leases: cannot reach {self.where}: {exc}") from None

    async def take(self, camera: str) -> bool:
        """Take ``camera``'s lease if no other replica holds it; True if this one now does."""
        if camera in self.held:
            return True
        row = await self._query("SELECT pg_try_advisory_lock($1)", lease_key(camera))
        if row:
            self.held.add(camera)
        return bool(row)

    async def release(self, camera: str) -> None:
        """Let ``camera`` go (it stopped here)."""
        if camera not in self.held:
            return
        self.held.discard(camera)
        with contextlib.suppress(LeaseError):  # a lost connection released it already
            await self._query("SELECT pg_advisory_unlock($1)", lease_key(camera))

    async def check(self) -> None:
        """Raise :class:`LeaseError` if the connection (and so every lease) is lost."""
        await self._query("SELECT 1")

    async def close(self) -> None:
        """Let every camera go (the session ends)."""
        await self._drop()

    async def _query(self, sql: str, *args: object) -> object:
        if not self.connected:
            raise LeaseError(f"camera leases: not connected to {self.where}")
        assert self._connection is not None
        async with self._lock:
            try:
                return await self._connection.fetchval(sql, *args)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
                await self._drop()
                raise LeaseError(f"camera leases: lost {self.where}: {exc}") from None

    async def _drop(self) -> None:
        self.held.clear()
        connection, self._connection = self._connection, None
        if connection is not None and not connection.is_closed():
            try:
                await asyncio.wait_for(connection.close(), CONNECT_TIMEOUT_S)
            except (OSError, asyncpg.PostgresError, TimeoutError):
                connection.terminate()


#: How often the leases of waiting cameras are tried again and the connection is checked.
LEASE_CHECK_S = 2.0


class LeaseGate:
    """Starts this replica's cameras once it holds their leases, and stops every one of them
    the moment the leases are lost (the part ``leases``). Without leases (one replica, or a
    history that is not on PostgreSQL) a camera starts at once."""

    def __init__(self, cameras: Cameras, leases: CameraLeases | None, grace_s: float) -> None:
        self.cameras = cameras
        self.leases = leases
        self.grace_s = grace_s
        #: Cameras of this replica that wait for their lease: name -> (config, settings).
        self.waiting: dict[str, tuple[CameraConfig, Settings]] = {}
        self._running: dict[str, tuple[CameraConfig, Settings]] = {}
        self._told: set[str] = set()  # waiting cameras already logged
        self._wake = asyncio.Event()
        self.problem: str | None = None

    def start(self, config: CameraConfig, settings: Settings) -> None:
        """Start ``config``'s camera now, or once its lease is taken."""
        if self.leases is None:
            self.cameras.start(config, settings)
            return
        self.waiting[config.name] = (config, settings)
        self._wake.set()

    async def stopped(self, names: list[str]) -> None:
        """These cameras were stopped (a reload): let their leases go."""
        for name in names:
            self.waiting.pop(name, None)
            self._running.pop(name, None)
            self._told.discard(name)
            if self.leases is not None:
                await self.leases.release(name)

    async def run(self) -> None:
        assert self.leases is not None
        while True:
            try:
                await self._step(self.leases)
            except LeaseError as exc:
                if str(exc) != self.problem:
                    LOG.warning("%s; its cameras stop until the leases are back", exc)
                self.problem = str(exc)
                await self._stop_all()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), LEASE_CHECK_S)

    async def _step(self, leases: CameraLeases) -> None:
        if not leases.connected:
            await leases.connect()
            if self.problem is not None:
                LOG.info("camera leases: %s reachable again", leases.where)
        else:
            await leases.check()
        self.problem = None
        for name, (config, settings) in list(self.waiting.items()):
            if await leases.take(name):
                del self.waiting[name]
                self._running[name] = (config, settings)
                if name in self._told:
                    LOG.info("camera %s: its lease is free; starting it", name)
                    self._told.discard(name)
                self.cameras.start(config, settings)
            elif name not in self._told:
                self._told.add(name)
                LOG.info(
                    "camera %s: another replica still runs it; it starts here once that one "
                    "lets it go",
                    name,
                )

    async def _stop_all(self) -> None:
        """The leases are lost: no camera may run on without its own."""
        names = [n for n in self._running if n in self.cameras.running]
        await self.cameras.stop(names, grace_s=self.grace_s)
        self.waiting.update(self._running)
        self._running.clear()

    async def close(self) -> None:
        """After the cameras stopped: let every lease go."""
        if self.leases is not None:
            await self.leases.close()
