"""streamer.inference.embedded.process: a child in its own group, stopped with nothing left."""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import threading
import time
from typing import IO

import pytest

from streamer.inference.embedded import process
from streamer.inference.embedded.errors import TritonStartError


class _Lines:
    """A pump that keeps what the child printed and says when a line came."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.came = threading.Event()

    def __call__(self, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            self.lines.append(raw.decode().strip())
            self.came.set()
        stream.close()


def _spawn(script: str) -> tuple[int, subprocess.Popen[bytes], threading.Thread]:
    lines = _Lines()
    proc, reader = process.spawn(["/bin/sh", "-c", script], dict(os.environ), lines)
    assert lines.came.wait(10), "the child never printed"
    assert lines.lines == ["started"]
    return proc.pid, proc, reader


def test_a_child_runs_in_its_own_group_and_leftovers_are_killed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The leader exits on SIGTERM; the child it started in the background would live on.
    pid, proc, reader = _spawn("sleep 60 & echo started; wait")
    stat = process.proc_stat(pid)
    assert stat is not None and stat[2] == pid  # the leader of its own process group
    assert len(process.group_members(pid)) == 2
    assert not process.leader_exited(proc) and process.exit_code(proc) is None
    with caplog.at_level(logging.INFO, logger="streamer.inference.embedded.server"):
        process.stop(proc, timeout_s=5.0)
    reader.join(5)
    assert process.group_members(pid) == [] and not process.alive(pid)
    assert proc.returncode == -15
    assert any("left behind" in r.getMessage() for r in caplog.records)


def test_a_child_that_ignores_sigterm_is_killed_after_the_timeout() -> None:
    pid, proc, reader = _spawn("trap '' TERM; echo started; while :; do sleep 0.1; done")
    began = time.monotonic()
    process.stop(proc, timeout_s=0.5)
    reader.join(5)
    assert 0.5 <= time.monotonic() - began < 5
    assert proc.returncode == -9 and process.group_members(pid) == []


def test_a_command_that_cannot_run_says_so() -> None:
    with pytest.raises(TritonStartError, match="cannot run /nonexistent/tritonserver"):
        process.spawn(["/nonexistent/tritonserver"], dict(os.environ), _Lines())


def test_free_ports_are_distinct() -> None:
    ports = process.free_ports("127.0.0.1", 3)
    assert len(set(ports)) == 3 and all(p > 0 for p in ports)


def test_shared_memory_regions_of_a_prefix_are_removed() -> None:
    prefix = f"lpr_triton_test_{secrets.token_hex(4)}_"
    mine = [process.SHM_DIR / f"{prefix}{i}" for i in range(2)]
    other = process.SHM_DIR / f"lpr_triton_test_{secrets.token_hex(4)}_0"
    for path in [*mine, other]:
        path.write_bytes(b"x")
    try:
        process.remove_shared_memory(prefix)
        assert [p.exists() for p in mine] == [False, False] and other.exists()
    finally:
        for path in [*mine, other]:
            path.unlink(missing_ok=True)
