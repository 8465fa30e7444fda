"""streamer.store.schema: one description of the history for SQLite and PostgreSQL."""

from __future__ import annotations

import re
import sqlite3

from streamer.store.schema import POSTGRESQL, SQLITE, history_schema, passes_holding


def _shape(schema: str) -> dict[str, list[str]]:
    """Table or index -> its column names, as the statements declare them."""
    shape: dict[str, list[str]] = {}
    for table, body in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\n\);", schema, re.S):
        shape[table] = [line.split()[0] for line in body.strip().splitlines()]
    for index, columns in re.findall(
        r"CREATE INDEX IF NOT EXISTS (\w+) ON passes\(([^)]*)\)", schema
    ):
        shape[index] = [c.strip() for c in columns.split(",")]
    return shape


def test_both_dialects_declare_the_same_tables_columns_and_indexes() -> None:
    sqlite_shape, postgresql_shape = (
        _shape(history_schema(SQLITE)),
        _shape(history_schema(POSTGRESQL)),
    )
    assert sqlite_shape == postgresql_shape
    assert set(sqlite_shape) >= {"passes", "versions", "pictures", "passes_by_text"}
    assert "withheld" in sqlite_shape["passes"]


def test_an_erasure_by_plate_finds_the_passes_any_version_of_which_holds_it() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.executescript(history_schema(SQLITE))
    passes = [
        ("a", ['{"text": "A123BC77"}']),
        ("b", ['{"text": "B1"}', '{"text": "A123BC77"}']),  # corrected to it
        ("c", ['{"text": "C1"}']),
    ]
    for n, (event_id, payloads) in enumerate(passes):
        conn.execute(
            "INSERT INTO passes (event_id, camera, text, first_seen, version, payload) "
            "VALUES (?, 'gate', 'x', ?, ?, ?)",
            (event_id, float(n), len(payloads), payloads[-1]),
        )
        for version, payload in enumerate(payloads, 1):
            conn.execute("INSERT INTO versions VALUES (?, ?, ?)", (event_id, version, payload))
    conn.execute(f"DELETE FROM passes WHERE {passes_holding(SQLITE)}", ('"A123BC77"',))
    assert [r[0] for r in conn.execute("SELECT event_id FROM passes")] == ["c"]
    assert [r[0] for r in conn.execute("SELECT DISTINCT event_id FROM versions")] == ["c"]
    assert passes_holding(POSTGRESQL).endswith("strpos(payload, $1) > 0)")
