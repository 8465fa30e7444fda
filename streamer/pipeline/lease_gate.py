"""Starts a replica's cameras once it holds their leases, and stops them when it cannot keep
them (streamer/pipeline/leases.py says what a lease is).

Every ``ttl / 5`` (and at once when a camera is added) the gate renews the leases held,
stops the cameras whose lease was taken over, stops those whose lease is no longer valid
here because the database did not answer in time, takes the leases of the cameras waiting
for one and starts them, and says which cameras it runs (the double-run check). Every
replica given ``--shard`` (``0/1`` too: a standby beside another of the same config) takes
leases on a PostgreSQL history; one without it runs its cameras at once, whether the
database answers or not (a single service keeps its cameras through an outage of its
history), and only the double-run check runs: two such replicas on one history are found
out. Without PostgreSQL there are no leases and no check.

What it shows: ``lpr_camera_lease_waiting{camera}`` and ``lpr_camera_double_run{camera}``
(streamer/ops/service_metrics.py), and in ``/readyz`` the waiting cameras, the problem
with the database if any, and a problem for a camera waiting longer than the TTL plus
``WAIT_GRACE_S`` (its old owner neither renews nor lets it go) or run twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from streamer.pipeline.leases import CameraLeases, LeaseError

if TYPE_CHECKING:
    from streamer.config import CameraConfig, Settings
    from streamer.pipeline.cameras import Cameras

LOG = logging.getLogger(__name__)

#: Past the TTL, how long a camera may wait for its lease before readiness says so.
WAIT_GRACE_S = 5.0


class LeaseGate:
    """The part ``leases`` of a replica (see the module docstring)."""

    def __init__(
        self,
        cameras: Cameras,
        leases: CameraLeases | None,
        grace_s: float,
        *,
        leased: bool = True,
    ) -> None:
        """``leases``: the connection (None: no PostgreSQL history, no gate); ``leased``:
        whether cameras need a lease (a replica given ``--shard``), or only the double-run
        check."""
        self.cameras = cameras
        self.leases = leases
        self.leased = leases is not None and leased
        self.grace_s = grace_s
        #: Cameras of this replica that wait for their lease: name -> (config, settings).
        self.waiting: dict[str, tuple[CameraConfig, Settings]] = {}
        self._waiting_since: dict[str, float] = {}
        self._running: dict[str, tuple[CameraConfig, Settings]] = {}
        self._told: set[str] = set()  # waiting cameras already logged
        #: Cameras another replica runs too: name -> that replica (holder).
        self.doubles: dict[str, str] = {}
        self._wake = asyncio.Event()
        self.problem: str | None = None

    # -- what the service asks ---------------------------------------------------------------

    def start(self, config: CameraConfig, settings: Settings) -> None:
        """Start ``config``'s camera now, or once its lease is taken."""
        if not self.leased:
            self.cameras.start(config, settings)
            return
        self.waiting[config.name] = (config, settings)
        self._waiting_since.setdefault(config.name, time.monotonic())
        self._wake.set()

    def may_publish(self, camera: str) -> bool:
        """Whether a decision of ``camera`` may be published now: always without leases,
        else only while its lease is valid here."""
        return not self.leased or (self.leases is not None and self.leases.valid(camera))

    def token(self, camera: str) -> int | None:
        """The fencing token of ``camera``'s lease held here, which its events carry (None:
        no leases taken)."""
        if not self.leased or self.leases is None:
            return None
        return self.leases.token(camera)

    async def stopped(self, names: list[str]) -> None:
        """These cameras were stopped (a reload): let their leases go."""
        for name in names:
            self.waiting.pop(name, None)
            self._waiting_since.pop(name, None)
            self._running.pop(name, None)
            self._told.discard(name)
            if self.leased and self.leases is not None:
                await self.leases.release(name)

    def state(self) -> dict[str, object] | None:
        """For ``/readyz``: waiting cameras, the database's problem, the problems."""
        if self.leases is None:
            return None
        state: dict[str, object] = {"waiting": sorted(self.waiting), "problem": self.problem}
        if self.doubles:
            state["double_run"] = dict(sorted(self.doubles.items()))
        problems = self.problems()
        if problems:
            state["problems"] = problems  # (these make the replica not ready)
        return state

    def problems(self) -> list[str]:
        """What makes this replica not ready: cameras waiting too long, or run twice."""
        if self.leases is None:
            return []
        limit = self.leases.ttl_s + WAIT_GRACE_S
        now = time.monotonic()
        late = sorted(n for n in self.waiting if now - self._waiting_since.get(n, now) > limit)
        found = [f"camera {n} waits for its lease for over {limit:g} s" for n in late]
        found += [f"camera {n} runs on another replica too ({h})" for n, h in self.doubles.items()]
        return found

    # -- the part ----------------------------------------------------------------------------

    async def run(self) -> None:
        leases = self.leases
        assert leases is not None
        while True:
            try:
                await self._step(leases)
            except LeaseError as exc:
                if str(exc) != self.problem:
                    LOG.warning(
                        "%s; its cameras stop when their leases run out (%.0f s at most)",
                        exc,
                        leases.ttl_s * 2 / 3,
                    )
                self.problem = str(exc)
            await self._stop_invalid(leases)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), leases.renew_every_s)

    async def _step(self, leases: CameraLeases) -> None:
        await self._stop_invalid(leases)  # first: a replica continued after a freeze
        if not leases.connected:
            await leases.connect()
            if self.problem is not None:
                LOG.info("camera leases: %s reachable again", leases.where)
        if self.leased:
            for name in await leases.renew():
                LOG.warning("camera %s: its lease expired and another replica took it", name)
                await self._stop([name])
        self.problem = None
        if self.leased:
            await self._take_waiting(leases)
        await self._check_doubles(leases)

    async def _take_waiting(self, leases: CameraLeases) -> None:
        for name, (config, settings) in list(self.waiting.items()):
            if await leases.take(name):
                del self.waiting[name]
                self._waiting_since.pop(name, None)
                self._running[name] = (config, settings)
                if name in self._told:
                    LOG.info("camera %s: its lease is free; starting it", name)
                    self._told.discard(name)
                self.cameras.start(config, settings)
            elif name not in self._told:
                self._told.add(name)
                LOG.info(
                    "camera %s: another replica holds its lease; it starts here once that "
                    "one lets it go or its lease expires (%g s)",
                    name,
                    leases.ttl_s,
                )

    async def _check_doubles(self, leases: CameraLeases) -> None:
        doubles = await leases.seen_running(sorted(self.cameras.running))
        for name, holder in doubles.items():
            if name not in self.doubles:
                LOG.error("camera %s: another replica (%s) runs it too", name, holder)
        for name in set(self.doubles) - set(doubles):
            LOG.info("camera %s: runs on this replica only again", name)
        self.doubles = doubles

    async def _stop_invalid(self, leases: CameraLeases) -> None:
        """Stop the cameras whose lease is not valid here any more."""
        if not self.leased:
            return
        expired = [n for n in self._running if not leases.valid(n)]
        if expired:
            LOG.warning(
                "camera(s) %s: lease not renewed in time; stopped so that another replica "
                "may take them",
                ", ".join(expired),
            )
            await self._stop(expired)

    async def _stop(self, names: list[str]) -> None:
        """Stop ``names`` (their lease is gone) and wait for it again."""
        running = [n for n in names if n in self.cameras.running]
        await self.cameras.stop(running, grace_s=self.grace_s)
        now = time.monotonic()
        for name in names:
            if self.leases is not None:
                self.leases.held.pop(name, None)  # taken again (its row may still be ours)
            entry = self._running.pop(name, None)
            if entry is not None:
                self.waiting[name] = entry
                self._waiting_since.setdefault(name, now)

    async def close(self) -> None:
        """After the cameras stopped: let every lease go."""
        if self.leases is not None:
            await self.leases.close()
