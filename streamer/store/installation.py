"""The installation's id: a short random name that tells one installation from another.

Two installations publishing to one MQTT broker with the same topics would replace each
other's retained ``last`` and ``status`` messages and clear each other's Home Assistant
configs. So the default ``mqtt.topic_prefix`` (``lpr/{installation}``) and
``mqtt.discovery.node_id`` (``lpr-{installation}``) hold this id
(streamer/config/mqtt.py, ``INSTALLATION``).

Where it is kept: with a PostgreSQL history, in the history (table ``lpr_installation``),
so that every replica of the installation has the same one; otherwise in the file
``installation-id`` in the data folder, beside the event log. It is made once, at the first
start (8 hex digits), and kept: delete it (or the history) and the topics change.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
from pathlib import Path

from streamer.store.base import EventStore
from streamer.store.postgresql import PostgresEventStore

LOG = logging.getLogger(__name__)

#: The file that keeps the id when there is no PostgreSQL history.
INSTALLATION_FILE = "installation-id"
#: What an id looks like (it goes into topics and Home Assistant's unique ids).
_ID = re.compile(r"^[0-9a-f]{8}$")


def new_id() -> str:
    return secrets.token_hex(4)


def id_in_file(path: Path) -> str:
    """The id kept in ``path``, made (atomically: two processes agree) when it is missing;
    a file that does not hold an id is an error naming it."""
    if path.exists():
        return _read_id(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    candidate = new_id()
    # Written whole under another name, then linked into place: a process that finds the
    # file finds it complete, and of two that make one at once, one link wins.
    draft = path.with_name(f".{path.name}.{os.getpid()}.{candidate}")
    try:
        draft.write_text(candidate + "\n", encoding="ascii")
        with draft.open("rb") as written:
            os.fsync(written.fileno())
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        else:
            LOG.info("installation id %s made (kept in %s)", candidate, path)
            return candidate
    finally:
        draft.unlink(missing_ok=True)
    return _read_id(path)


def _read_id(path: Path) -> str:
    found = path.read_text(encoding="ascii", errors="replace").strip()
    if not _ID.match(found):
        raise ValueError(f"{path} does not hold an installation id (8 hex digits): {found!r:.40}")
    return found


async def installation_id(store: EventStore | None, data_folder: Path) -> str:
    """The installation's id: from a PostgreSQL ``store`` (made there on first use), else
    from the file in ``data_folder``. Raises ``OSError``/``ValueError`` for a file it
    cannot read or make, :class:`~streamer.store.base.StoreError` for the history."""
    if isinstance(store, PostgresEventStore):
        return await store.installation_id(new_id())
    return await asyncio.to_thread(id_in_file, data_folder / INSTALLATION_FILE)
