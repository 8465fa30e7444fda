"""The history's backends for the store tests: a SQLite file, and a database of its own on a
real PostgreSQL server started once for the session (``postgres``, tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamer.config import StorageConfig
from tests.postgres_server import PostgresServer


@pytest.fixture(params=["sqlite", "postgresql"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> StorageConfig:
    """A ``storage:`` section of each backend, on an empty history."""
    if request.param == "sqlite":
        return StorageConfig(path=tmp_path / "data" / "events.sqlite3")
    server: PostgresServer = request.getfixturevalue("postgres")
    return StorageConfig(backend="postgresql", dsn=server.database())
