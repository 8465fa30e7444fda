"""The history's tables, once for both backends: what differs is the dialect's words only.

A pass is a row of ``passes`` (its latest version's payload and the columns the search
uses), every version of it a row of ``versions``, its pictures a row of ``pictures``; both go
with the pass (``ON DELETE CASCADE``), so an erasure deletes passes and nothing else. The
SQLite file (streamer/store/sqlite.py) and the PostgreSQL history shared by replicas
(streamer/store/postgresql.py) create them from :func:`history_schema` in their dialect.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    """The words one database uses for the same schema and statements."""

    name: str
    serial_key: str  # an auto-numbered primary key
    text: str
    plate_text: str  # the plate's text: compared byte by byte (prefix search, sorting)
    integer: str
    real: str
    boolean: str
    false: str
    blob: str
    find: str  # position of a substring, 0 when absent: find(haystack, needle)
    mark: str  # the first argument's placeholder


SQLITE = Dialect(
    name="sqlite",
    serial_key="INTEGER PRIMARY KEY AUTOINCREMENT",
    text="TEXT",
    plate_text="TEXT",  # SQLite compares TEXT byte by byte (BINARY) already
    integer="INTEGER",
    real="REAL",
    boolean="INTEGER",
    false="0",
    blob="BLOB",
    find="instr",
    mark="?",
)
POSTGRESQL = Dialect(
    name="postgresql",
    serial_key="bigserial PRIMARY KEY",
    text="text",
    plate_text='text COLLATE "C"',
    integer="integer",
    real="double precision",
    boolean="boolean",
    false="false",
    blob="bytea",
    find="strpos",
    mark="$1",
)


def history_schema(d: Dialect) -> str:
    """The tables and indexes of a history, created if absent."""
    return f"""
CREATE TABLE IF NOT EXISTS passes (
    seq {d.serial_key},
    event_id {d.text} NOT NULL UNIQUE,
    camera {d.text} NOT NULL,
    text {d.plate_text} NOT NULL,
    label {d.text},
    alert {d.boolean} NOT NULL DEFAULT {d.false},
    first_seen {d.real} NOT NULL,
    version {d.integer} NOT NULL,
    payload {d.text} NOT NULL,
    withheld {d.boolean} NOT NULL DEFAULT {d.false}
);
CREATE TABLE IF NOT EXISTS versions (
    event_id {d.text} NOT NULL REFERENCES passes(event_id) ON DELETE CASCADE,
    version {d.integer} NOT NULL,
    payload {d.text} NOT NULL,
    PRIMARY KEY (event_id, version)
);
CREATE TABLE IF NOT EXISTS pictures (
    event_id {d.text} PRIMARY KEY REFERENCES passes(event_id) ON DELETE CASCADE,
    crop {d.blob} NOT NULL,
    frame {d.blob}
);
CREATE INDEX IF NOT EXISTS passes_by_time ON passes(first_seen);
CREATE INDEX IF NOT EXISTS passes_by_camera ON passes(camera, seq);
CREATE INDEX IF NOT EXISTS passes_by_text ON passes(text);
CREATE INDEX IF NOT EXISTS passes_by_label ON passes(label, seq);
CREATE INDEX IF NOT EXISTS passes_reported ON passes(seq) WHERE NOT withheld;
CREATE INDEX IF NOT EXISTS passes_withheld ON passes(seq) WHERE withheld;
"""


def passes_holding(d: Dialect) -> str:
    """The condition on ``passes`` of an erasure by plate: a pass any version of which holds
    the argument (the plate as its payload's JSON writes it: text, candidates, a corrected
    text, a known plate matched)."""
    return f"event_id IN (SELECT event_id FROM versions WHERE {d.find}(payload, {d.mark}) > 0)"
