"""One process owns a file (the event log): a ``flock`` on ``<file>.lock`` that holds the
owner's pid and host.

Why ``flock`` on a file beside it and not SQLite's own locks: SQLite locks a database only
while a statement runs, and lets any number of processes open it; ownership must last as long
as the process does, and the kernel frees a ``flock`` however the process dies (``kill -9``
included), so a restarted service never waits for a stale lock.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path


class FileInUseError(Exception):
    """Another process owns the file; ``holder`` says which (``pid N on HOST``)."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is in use by another process ({holder})")
        self.path = path
        self.holder = holder


def lock_path(path: Path) -> Path:
    """The file whose lock says which process owns ``path``."""
    return path.with_name(path.name + ".lock")


def take_ownership(path: Path) -> int:
    """Lock ``path``'s lock file for this process and write its pid and host in it; the file
    descriptor to close at the end (which frees it). Raises :class:`FileInUseError` naming
    the holder when another process (or another open of it in this one) has it."""
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
        os.close(fd)
        raise FileInUseError(path, holder) from None
    except OSError:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    return fd
