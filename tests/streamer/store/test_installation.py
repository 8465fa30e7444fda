"""The installation's id: made once and kept (a file in the data folder, or a row of a
PostgreSQL history that every replica reads), the same for processes that make it at once,
and a file that holds something else refused by name."""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from streamer.config import StorageConfig
from streamer.store.base import open_event_store
from streamer.store.installation import INSTALLATION_FILE, id_in_file, installation_id
from tests.postgres_server import PostgresServer

ID = re.compile(r"^[0-9a-f]{8}$")


async def test_the_file_id_is_made_once_and_kept(tmp_path: Path) -> None:
    folder = tmp_path / "data"  # missing: made
    first = await installation_id(None, folder)
    assert ID.match(first)
    assert (folder / INSTALLATION_FILE).read_text() == first + "\n"
    assert await installation_id(None, folder) == first
    assert [p.name for p in folder.iterdir()] == [INSTALLATION_FILE]  # no draft left
    assert await installation_id(None, tmp_path / "elsewhere") != first


def test_processes_that_make_it_at_once_agree(tmp_path: Path) -> None:
    path = tmp_path / INSTALLATION_FILE
    with ThreadPoolExecutor(8) as pool:
        ids = set(pool.map(lambda _: id_in_file(path), range(32)))
    assert len(ids) == 1 and ids == {path.read_text().strip()}


@pytest.mark.parametrize("content", ["", "not an id\n", "ABCDEF12"])
def test_a_file_that_holds_no_id_is_refused_by_name(tmp_path: Path, content: str) -> None:
    path = tmp_path / INSTALLATION_FILE
    path.write_text(content)
    with pytest.raises(ValueError, match=re.escape(str(path))):
        id_in_file(path)
    assert path.read_text() == content  # left as found


async def test_replicas_of_a_postgresql_history_share_it(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    storage = StorageConfig(backend="postgresql", dsn=postgres.database())
    stores = [await open_event_store(storage) for _ in range(3)]
    try:
        # Each replica has its own data folder; the history's id is theirs.
        ids = await asyncio.gather(
            *(installation_id(s, tmp_path / f"r{i}") for i, s in enumerate(stores))
        )
        assert len(set(ids)) == 1 and ID.match(ids[0])
        assert not any((tmp_path / f"r{i}").exists() for i in range(3))
        again = await open_event_store(storage)  # a restart
        try:
            assert await installation_id(again, tmp_path / "r0") == ids[0]
        finally:
            await again.close()
        other = await open_event_store(StorageConfig(backend="postgresql", dsn=postgres.database()))
        try:  # another installation's history
            assert await installation_id(other, tmp_path) != ids[0]
        finally:
            await other.close()
    finally:
        for store in stores:
            await store.close()
