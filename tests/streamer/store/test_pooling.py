"""A PostgreSQL history behind a real PgBouncer: refused at open, in one line, in
transaction pooling (two clients share a server session: asyncpg's prepared statements and
the history's session would break at random); used as it is behind session pooling, and on
a direct connection."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamer.config import StorageConfig
from streamer.store.base import EventQuery, open_event_store
from streamer.store.pooling import PoolingProxyError
from tests.pgbouncer_proxy import PgBouncer
from tests.postgres_server import PostgresServer
from tests.streamer.store.test_event_store import T0, _event, _texts


@pytest.mark.parametrize("pool_mode", ["transaction", "statement"])
async def test_a_transaction_pooling_proxy_is_refused_at_open(
    postgres: PostgresServer, tmp_path: Path, pool_mode: str
) -> None:
    database = postgres.database()
    with PgBouncer(tmp_path / "pgbouncer", postgres, pool_mode) as proxy:
        storage = StorageConfig(backend="postgresql", dsn=proxy.dsn(database))
        with pytest.raises(PoolingProxyError) as refused:
            await open_event_store(storage)
    message = str(refused.value)
    assert "transaction-pooling proxy" in message and "pool_mode = session" in message
    assert "\n" not in message and f":{proxy.port}/" in message
    direct = await open_event_store(StorageConfig(backend="postgresql", dsn=database))
    await direct.close()  # the server itself was never the problem


async def test_session_pooling_works_as_a_direct_connection(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    with PgBouncer(tmp_path / "pgbouncer", postgres, "session") as proxy:
        storage = StorageConfig(backend="postgresql", dsn=proxy.dsn(postgres.database()))
        store = await open_event_store(storage)
        try:
            await store.add(await _event("O567AM76", camera="gate", at=T0))
            assert _texts((await store.search(EventQuery())).events) == ["O567AM76"]
        finally:
            await store.close()
