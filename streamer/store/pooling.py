"""Refuse a PostgreSQL reached through a transaction-pooling proxy, at start, in one line.

Behind PgBouncer in ``pool_mode = transaction`` (or ``statement``) a client's statements run
on whichever server connection is free: session state (prepared statements, which asyncpg
uses for every query with arguments, and anything ``SET``) is shared with other clients or
lost between two statements. The history would fail at random ("prepared statement does not
exist"), so it is refused before it is used.

No proxy says what it is, so the probe asks the one thing that tells: whether two client
connections, the first still open, share one server session. On a direct connection and
behind session pooling each client has its own; behind transaction pooling the second gets
the server connection the first has just given back (PgBouncer reuses the most recently
freed one first). The first client marks its session with a custom setting (which PgBouncer
does not carry between clients, unlike ``application_name``); the second looks for the
mark. Simple-query statements only, so that the probe itself works through any proxy.
"""

from __future__ import annotations

import secrets

import asyncpg

from streamer.store.base import StoreError

#: Seconds to connect, and for one statement of the probe.
PROBE_TIMEOUT_S = 10.0
#: Tries: a busy pool may hand the second client another server connection once.
PROBE_ROUNDS = 3
_SETTING = "lpr.pooling_probe"


class PoolingProxyError(StoreError):
    """The DSN reaches PostgreSQL through a transaction-pooling proxy."""


async def refuse_transaction_pooling(dsn: str, where: str) -> None:
    """Raises :class:`PoolingProxyError` when two connections to ``dsn`` share a server
    session (``where``: the server, as errors name it)."""
    first = await _connect(dsn)
    try:
        for _ in range(PROBE_ROUNDS):
            mark = secrets.token_hex(8)
            await first.execute(f"SET {_SETTING} = '{mark}'", timeout=PROBE_TIMEOUT_S)
            second = await _connect(dsn)
            try:
                shared = await _has_mark(second, mark)
            finally:
                await second.close(timeout=PROBE_TIMEOUT_S)
            if shared:
                raise PoolingProxyError(
                    f"{where} is reached through a transaction-pooling proxy (two connections "
                    "shared one server session; PgBouncer with pool_mode transaction?): the "
                    "history needs a session of its own. Point storage.dsn at PostgreSQL "
                    "itself, or use pool_mode = session"
                )
        await first.execute(f"RESET {_SETTING}", timeout=PROBE_TIMEOUT_S)
    finally:
        await first.close(timeout=PROBE_TIMEOUT_S)


async def _connect(dsn: str) -> asyncpg.Connection:
    # No statement cache: nothing prepared that a pooled server connection could lose.
    return await asyncpg.connect(
        dsn, timeout=PROBE_TIMEOUT_S, command_timeout=PROBE_TIMEOUT_S, statement_cache_size=0
    )


async def _has_mark(connection: asyncpg.Connection, mark: str) -> bool:
    """Whether ``connection``'s session carries ``mark``; a simple query, so it raises
    rather than returns (simple queries give no rows back through asyncpg's ``execute``)."""
    check = (
        "DO $$ BEGIN IF current_setting('" + _SETTING + "', true) = '" + mark + "' THEN "
        "RAISE EXCEPTION 'lpr-pooling-probe: shared session'; END IF; END $$"
    )
    try:
        await connection.execute(check, timeout=PROBE_TIMEOUT_S)
    except asyncpg.RaiseError as exc:
        if "lpr-pooling-probe" in str(exc):
            return True
        raise
    return False
