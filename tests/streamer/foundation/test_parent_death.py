"""streamer.foundation.parent_death: a wrapped child dies with the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from streamer.foundation.parent_death import dying_with_parent
from streamer.inference.embedded.process import alive

#: A parent that starts ``sleep 60`` (wrapped or not, as argv[1] says), prints its pid and waits.
PARENT = textwrap.dedent(
    """
    import subprocess, sys, time
    from streamer.foundation.parent_death import dying_with_parent
    cmd = ["sleep", "60"]
    if sys.argv[1] == "wrapped":
        cmd = dying_with_parent(cmd)
    child = subprocess.Popen(cmd, start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(60)
    """
)


def _orphan_after_parent_killed(mode: str) -> tuple[int, bool]:
    """Start PARENT in ``mode``, SIGKILL it; the child's pid and whether it was gone in 5 s."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, mode],
        stdout=subprocess.PIPE,
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert alive(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    return child, not alive(child)


def test_a_wrapped_child_dies_with_its_parent_and_a_plain_one_does_not() -> None:
    _, gone = _orphan_after_parent_killed("wrapped")
    assert gone, "the wrapped child outlived its parent's kill -9"
    orphan, gone = _orphan_after_parent_killed("plain")  # the control: the test can fail
    try:
        assert not gone
    finally:
        os.kill(orphan, signal.SIGKILL)


def test_the_command_keeps_the_pid_that_popen_returned() -> None:
    # exec keeps the pid: signals sent to Popen.pid reach the command itself, not a wrapper.
    child = subprocess.Popen(
        dying_with_parent(["/bin/sh", "-c", "echo $$"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = child.communicate(timeout=10)
    assert int(out) == child.pid and err == b"" and child.returncode == 0


def test_a_missing_executable_is_named_before_anything_starts() -> None:
    with pytest.raises(FileNotFoundError, match="no-such-tool"):
        dying_with_parent(["no-such-tool", "--flag"])
    with pytest.raises(FileNotFoundError, match="sleep"):
        dying_with_parent(["sleep", "1"], path="/nonexistent")


def test_an_executable_gone_by_exec_time_exits_127_saying_why(tmp_path: os.PathLike[str]) -> None:
    tool = os.path.join(tmp_path, "tool")
    with open(tool, "w") as script:
        script.write("#!/bin/sh\nexit 0\n")
    os.chmod(tool, 0o755)
    cmd = dying_with_parent([tool])
    os.remove(tool)
    done = subprocess.run(cmd, capture_output=True, timeout=10)
    assert done.returncode == 127
    assert f"cannot run {tool}" in done.stderr.decode()
