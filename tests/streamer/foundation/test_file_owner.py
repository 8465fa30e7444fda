"""One owner per file: a second lock is refused naming the holder, also within one process
(two opens), and a lock held by a process that was killed -9 is free at once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from streamer.foundation.file_owner import FileInUseError, lock_path, take_ownership

HOLD = """
import sys, time
from pathlib import Path
from streamer.foundation.file_owner import take_ownership
take_ownership(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_owner_is_refused_naming_the_first(tmp_path: Path) -> None:
    path = tmp_path / "data" / "outbox.sqlite3"
    fd = take_ownership(path)
    try:
        assert lock_path(path).read_text() == f"pid {os.getpid()} on {socket.gethostname()}\n"
        with pytest.raises(FileInUseError) as refused:
            take_ownership(path)
        assert refused.value.holder == f"pid {os.getpid()} on {socket.gethostname()}"
    finally:
        os.close(fd)
    os.close(take_ownership(path))  # free again once closed


def test_the_lock_of_a_killed_process_is_free_at_once(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite3"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(FileInUseError, match=f"pid {holder.pid} on"):
            take_ownership(path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    os.close(take_ownership(path))
