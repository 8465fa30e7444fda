"""The history's backends for the store tests: a SQLite file, and a database of its own on a
real PostgreSQL server started once for the session (tests/postgres_server.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from streamer.config import StorageConfig
from tests.postgres_server import PostgresServer


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    with PostgresServer(tmp_path_factory.mktemp("postgres")) as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> StorageConfig:
    """A ``storage:`` section of each backend, on an empty history."""
    if request.param == "sqlite":
        return StorageConfig(path=tmp_path / "data" / "events.sqlite3")
    server: PostgresServer = request.getfixturevalue("postgres")
    return StorageConfig(backend="postgresql", dsn=server.database())
