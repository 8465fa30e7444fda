"""Camera leases and the lease gate (streamer/pipeline/leases.py, lease_gate.py) on a real
PostgreSQL: a lease is one holder's until it expires, a takeover gets a larger fencing
token and the old holder learns it lost the camera, and a camera run on two replicas (one
of them taking no leases) is found by both. The cameras here are a stand-in that records
starts and stops (the service-level behaviour, with real replicas, is in
tests/streamer/test_app_lease_freeze.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest

from streamer.pipeline.lease_gate import LeaseGate
from streamer.pipeline.leases import CameraLeases, LeaseError
from tests.polling import until
from tests.postgres_server import PostgresServer

TTL_S = 3.0  # the least the config allows


class RecordedCameras:
    """What the gate drives: cameras it starts and stops, by name."""

    def __init__(self) -> None:
        self.running: dict[str, object] = {}
        self.stops: list[str] = []

    def start(self, config: Any, settings: Any) -> None:
        self.running[config.name] = config

    async def stop(self, names: list[str], *, grace_s: float) -> None:
        for name in names:
            self.running.pop(name, None)
            self.stops.append(name)


@contextlib.asynccontextmanager
async def gate(dsn: str, holder: str, *, leased: bool = True) -> AsyncIterator[LeaseGate]:
    leases = CameraLeases(dsn, "test database", TTL_S, holder=holder)
    the_gate = LeaseGate(RecordedCameras(), leases, 1.0, leased=leased)  # type: ignore[arg-type]
    task = asyncio.create_task(the_gate.run())
    try:
        yield the_gate
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await the_gate.close()


def _camera(name: str) -> Any:
    return SimpleNamespace(name=name)


async def test_a_lease_is_one_holders_until_it_expires(postgres: PostgresServer) -> None:
    dsn = postgres.database()
    a = CameraLeases(dsn, "db", TTL_S, holder="a")
    b = CameraLeases(dsn, "db", TTL_S, holder="b")
    await a.connect()
    await b.connect()
    try:
        assert await a.take("yard")
        first = a.token("yard")
        assert not await b.take("yard")  # A holds it
        assert await a.renew() == set()
        assert not await b.take("yard")  # renewed: still A's
        await asyncio.sleep(TTL_S + 0.5)  # A does not renew: it expires on the server...
        assert not a.valid("yard")  # ...and A stopped counting on it a third earlier
        assert await b.take("yard")
        second = b.token("yard")
        assert first is not None and second is not None and second > first  # fencing
        assert await a.renew() == {"yard"}  # A learns that it lost the camera
        assert a.token("yard") is None
        await b.release("yard")
        assert await a.take("yard")  # released: free at once
        third = a.token("yard")
        # Each take started a term, in the server's clock: the history fences by them.
        connection = await asyncpg.connect(dsn)
        try:
            terms = await connection.fetch(
                "SELECT token, holder, started_at FROM lpr_lease_terms WHERE camera = 'yard' "
                "ORDER BY token"
            )
        finally:
            await connection.close()
        assert [(t["token"], t["holder"]) for t in terms] == [
            (first, "a"),
            (second, "b"),
            (third, "a"),
        ]
        lasted = (terms[1]["started_at"] - terms[0]["started_at"]).total_seconds()
        assert lasted >= TTL_S  # B's term started only once A's lease had expired
    finally:
        await a.close()
        await b.close()


async def test_an_unreachable_database_is_a_lease_error() -> None:
    leases = CameraLeases("postgresql://lpr@127.0.0.1:9/none", "db :9", TTL_S, holder="a")
    with pytest.raises(LeaseError, match="cannot reach db :9"):
        await leases.connect()


async def test_a_standby_takes_the_camera_when_the_holder_lets_go(
    postgres: PostgresServer,
) -> None:
    dsn = postgres.database()
    async with gate(dsn, "a") as a:
        a.start(_camera("yard"), None)  # type: ignore[arg-type]
        await until(lambda: "yard" in a.cameras.running, 10, "A running yard")
        async with gate(dsn, "b") as b:
            b.start(_camera("yard"), None)  # type: ignore[arg-type]
            await until(lambda: "yard" in b.waiting, 10, "B waiting")
            await asyncio.sleep(TTL_S * 1.5)  # A renews: B keeps waiting
            assert "yard" not in b.cameras.running and b.state() == {
                "waiting": ["yard"],
                "problem": None,
            }
            assert b.may_publish("yard") is False and a.may_publish("yard") is True
            await a.cameras.stop(["yard"], grace_s=1.0)
            await a.stopped(["yard"])  # (a reload removed it from A)
            await until(lambda: "yard" in b.cameras.running, TTL_S + 2, "B running yard")
            assert b.may_publish("yard") and b.state() == {"waiting": [], "problem": None}


async def test_a_camera_run_on_two_replicas_is_found_by_both(postgres: PostgresServer) -> None:
    dsn = postgres.database()
    async with gate(dsn, "a") as a, gate(dsn, "rogue", leased=False) as rogue:
        a.start(_camera("yard"), None)  # type: ignore[arg-type]
        rogue.start(_camera("yard"), None)  # type: ignore[arg-type]  (no lease: runs at once)
        found = await until(
            lambda: "yard" in a.doubles and "yard" in rogue.doubles, 3 * TTL_S, "both told"
        )
        print(f"the double run was found {found:.1f} s after both ran it")
        assert a.doubles["yard"] == "rogue" and rogue.doubles["yard"] == "a"
        assert any("runs on another replica too" in p for p in a.problems())
        await rogue.cameras.stop(["yard"], grace_s=1.0)
        await until(lambda: not a.doubles, 4 * TTL_S, "A to see the double run end")
        assert a.problems() == []
