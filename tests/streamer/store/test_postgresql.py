"""What the PostgreSQL backend adds: one history for several replicas (each its own store
on the same database), a stale lease holder's events refused (fencing), a history of
schema 1 brought up to date (and one newer than this version refused), and a server that
cannot be reached or refuses named without its password. The interface itself is tested on
both backends in test_event_store.py."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time
from pathlib import Path

import asyncpg
import pytest

from streamer.config import ConfigError, StorageConfig, load_config
from streamer.delivery.events import LeaseStamp, PlateEvent, utc_iso
from streamer.pipeline.leases import CameraLeases
from streamer.store.base import EventQuery, StaleLeaseError, StoreError, open_event_store
from tests.postgres_server import PostgresServer
from tests.streamer.store.test_event_store import T0, _event, _texts, v1_row

#: The history's tables as schema 1 created them, verbatim (streamer/store/postgresql.py).
#: A frozen copy on purpose, not an import: the migration must keep reading what old
#: releases wrote, whatever the module's own DDL becomes.
POSTGRES_SCHEMA_1 = """
CREATE TABLE IF NOT EXISTS lpr_store_schema (version integer NOT NULL);
CREATE TABLE IF NOT EXISTS passes (
    seq bigserial PRIMARY KEY,
    event_id text NOT NULL UNIQUE,
    camera text NOT NULL,
    text text COLLATE "C" NOT NULL,
    label text,
    alert boolean NOT NULL DEFAULT false,
    first_seen double precision NOT NULL,
    version integer NOT NULL,
    payload text NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (
    event_id text NOT NULL REFERENCES passes(event_id) ON DELETE CASCADE,
    version integer NOT NULL,
    payload text NOT NULL,
    PRIMARY KEY (event_id, version)
);
CREATE TABLE IF NOT EXISTS pictures (
    event_id text PRIMARY KEY REFERENCES passes(event_id) ON DELETE CASCADE,
    crop bytea NOT NULL,
    frame bytea
);
CREATE INDEX IF NOT EXISTS passes_by_time ON passes(first_seen);
CREATE INDEX IF NOT EXISTS passes_by_camera ON passes(camera, seq);
CREATE INDEX IF NOT EXISTS passes_by_text ON passes(text);
CREATE INDEX IF NOT EXISTS passes_by_label ON passes(label, seq);
"""


async def test_two_replicas_share_one_history(postgres: PostgresServer) -> None:
    storage = StorageConfig(backend="postgresql", dsn=postgres.database())
    first, second = await open_event_store(storage), await open_event_store(storage)
    try:
        await first.add(await _event("O567AM76", camera="gate", at=T0))
        await second.add(await _event("Y836XH76", camera="yard", at=T0 + 1))
        for store in (first, second):
            assert _texts((await store.search(EventQuery())).events) == ["Y836XH76", "O567AM76"]
        assert _texts((await second.search(EventQuery(plate="O567AM7", fuzzy=True))).events) == [
            "O567AM76"
        ]
        # A plate one replica stores is found by the other's next fuzzy search.
        await first.add(await _event("O567AM77", camera="gate", at=T0 + 2))
        found = await second.search(EventQuery(plate="O567AM7", fuzzy=True))
        assert _texts(found.events) == ["O567AM77", "O567AM76"]
        # Pages across what both stored: each pass once.
        page = await second.search(EventQuery(limit=2))
        rest = await first.search(EventQuery(limit=2, cursor=page.next_cursor))
        assert _texts(page.events + rest.events) == ["O567AM77", "Y836XH76", "O567AM76"]
        assert await second.erase(plate="Y836XH76") == 1
        assert _texts((await first.search(EventQuery())).events) == ["O567AM77", "O567AM76"]
    finally:
        await first.close()
        await second.close()


def _under(event: PlateEvent, token: int | None, decided_at: float) -> PlateEvent:
    assert token is not None
    return dataclasses.replace(event, lease=LeaseStamp(token, utc_iso(decided_at)))


async def test_a_stale_lease_holders_events_are_refused(postgres: PostgresServer) -> None:
    dsn = postgres.database()
    store = await open_event_store(StorageConfig(backend="postgresql", dsn=dsn))
    old_holder = CameraLeases(dsn, "db", 3.0, holder="old")
    new_holder = CameraLeases(dsn, "db", 3.0, holder="new")
    await old_holder.connect()
    await new_holder.connect()
    try:
        # A lease without a later term: nothing to refuse.
        assert await old_holder.take("yard")
        old = old_holder.token("yard")
        within = time.time()
        await store.add(_under(await _event("O567AM76", camera="yard"), old, within))
        await asyncio.sleep(0.05)
        await old_holder.release("yard")
        assert await new_holder.take("yard")  # a new term, a larger token
        new = new_holder.token("yard")
        assert old is not None and new is not None and new > old
        await asyncio.sleep(0.05)
        after = time.time()

        # Decided under the old lease before the takeover, stored late: kept.
        late = _under(await _event("Y836XH76", camera="yard"), old, within)
        await store.add(late)
        # Decided under the old lease after the takeover: refused, never stored.
        stale = _under(await _event("P667AM76", camera="yard"), old, after)
        with pytest.raises(StaleLeaseError, match=rf"token {old}, .*\(new\).*token {new}"):
            await store.add(stale)
        # A correction of a kept pass by the stale holder changes nothing either.
        correction = dataclasses.replace(late, version=2, text="Y836XH77", previous_text=late.text)
        with pytest.raises(StaleLeaseError):
            await store.add(_under(correction, old, after))
        # The new holder's, another camera's under the old token, one with no lease: kept.
        await store.add(_under(await _event("A001AA76", camera="yard"), new, after))
        await store.add(_under(await _event("A002AA76", camera="gate"), old, after))
        await store.add(await _event("A003AA76", camera="yard"))

        assert await store.get(stale.event_id) is None
        kept = await store.get(late.event_id)
        assert kept is not None and [v["text"] for v in kept.versions] == ["Y836XH76"]
        assert kept.payload["lease"] == {"token": old, "decided_at": utc_iso(within)}
        texts = _texts((await store.search(EventQuery())).events)
        assert sorted(texts) == ["A001AA76", "A002AA76", "A003AA76", "O567AM76", "Y836XH76"]
    finally:
        await old_holder.close()
        await new_holder.close()
        await store.close()


async def test_an_event_with_a_lease_on_a_database_without_leases_is_kept(
    postgres: PostgresServer,
) -> None:
    store = await open_event_store(StorageConfig(backend="postgresql", dsn=postgres.database()))
    try:
        event = _under(await _event("O567AM76", camera="yard"), 7, time.time())
        await store.add(event)  # (no lease table: no newer term)
        assert await store.get(event.event_id) is not None
    finally:
        await store.close()


async def test_a_history_of_schema_1_is_brought_up_to_date_keeping_its_passes(
    postgres: PostgresServer,
) -> None:
    dsn = postgres.database()
    old = await _event("O567AM76", at=T0)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(POSTGRES_SCHEMA_1)
        await conn.execute("INSERT INTO lpr_store_schema VALUES (1)")
        await conn.execute(
            "INSERT INTO passes (event_id, camera, text, label, alert, first_seen, version, "
            "payload) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            *v1_row(old),
        )
        await conn.execute(
            "INSERT INTO versions (event_id, version, payload) VALUES ($1, 1, $2)",
            old.event_id,
            v1_row(old)[-1],
        )
        await conn.execute(
            "INSERT INTO pictures (event_id, crop, frame) VALUES ($1, $2, $3)",
            old.event_id,
            old.crop_jpeg,
            old.frame_jpeg,
        )
    finally:
        await conn.close()

    storage = StorageConfig(backend="postgresql", dsn=dsn)
    first = await open_event_store(storage)
    second = await open_event_store(storage)  # another replica: nothing left to migrate
    try:
        for store in (first, second):
            assert [e.event_id for e in (await store.search(EventQuery())).events] == [old.event_id]
            assert (await store.search(EventQuery(withheld=True))).events == []
        stored = await first.get(old.event_id)
        assert stored is not None and stored.payload["type"] == "plate" and stored.has_frame
        await second.add(await _event("O567AM77", at=T0 + 1, withheld="low_confidence"))
        assert _texts((await first.search(EventQuery(withheld=True))).events) == ["O567AM77"]
        assert _texts((await first.search(EventQuery(withheld=None))).events) == [
            "O567AM77",
            "O567AM76",
        ]
    finally:
        await first.close()
        await second.close()
    conn = await asyncpg.connect(dsn)
    try:
        assert [r[0] for r in await conn.fetch("SELECT version FROM lpr_store_schema")] == [2]
        rows = await conn.fetch("SELECT text, withheld FROM passes ORDER BY seq")
        assert [tuple(r) for r in rows] == [("O567AM76", False), ("O567AM77", True)]
        await conn.execute("UPDATE lpr_store_schema SET version = 3")  # a later version's
    finally:
        await conn.close()
    with pytest.raises(StoreError, match="schema 3 is newer"):
        await open_event_store(storage)


async def test_a_server_that_refuses_is_named_without_the_password() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dsn = f"postgresql://lpr:pg-s3cret-pw@127.0.0.1:{port}/lpr"
    with pytest.raises(StoreError) as info:
        await open_event_store(StorageConfig(backend="postgresql", dsn=dsn))
    assert f"127.0.0.1:{port}" in str(info.value) and "pg-s3cret-pw" not in str(info.value)


def test_postgresql_needs_a_dsn_and_never_shows_it(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text("cameras: [{name: gate, url: rtsp://cam/x}]\nstorage: {backend: postgresql}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert "storage.dsn" in str(info.value) and "required when backend is postgresql" in str(
        info.value
    )
    path.write_text(
        "cameras: [{name: gate, url: rtsp://cam/x}]\n"
        "storage: {backend: postgresql, dsn: '${LPR_HISTORY_DSN}'}\n"
    )
    secret = "postgresql://lpr:pg-s3cret-pw@db:5432/lpr"
    settings = load_config(path, env={"LPR_HISTORY_DSN": secret})
    assert settings.storage.dsn is not None and settings.storage.dsn.get_secret_value() == secret
    assert "pg-s3cret-pw" not in repr(settings) and "pg-s3cret-pw" not in str(settings.redacted())
    path.write_text(
        "cameras: [{name: gate, url: rtsp://cam/x}]\n"
        "storage: {backend: postgresql, dsn: 'mysql://u:pg-s3cret-pw@db/x'}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert "postgresql://" in str(info.value) and "pg-s3cret-pw" not in str(info.value)
