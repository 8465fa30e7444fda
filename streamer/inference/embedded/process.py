"""The ``tritonserver`` process: spawned so that it never outlives us, stopped so that nothing
of it is left.

* :func:`spawn` starts it in its own process group (a terminal's Ctrl-C does not reach it)
  with a parent-death signal (it gets SIGTERM when our process dies; ``ops/parent_death``).
* Whether it exited is read without reaping it (:func:`leader_exited`, :func:`exit_code`):
  while the leader is an unreaped zombie its process-group id cannot be reused, so the
  Python-backend stubs it left behind can still be killed by group.
* :func:`stop` sends SIGTERM, SIGKILLs the group after a timeout, kills leftover stubs and
  reaps the leader; :func:`remove_shared_memory` deletes the ``/dev/shm`` regions of its
  stubs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from streamer.foundation.parent_death import dying_with_parent
from streamer.inference.embedded.errors import TritonStartError
from streamer.inference.embedded.log import LOG

#: Where the Python backend keeps its shared-memory regions.
SHM_DIR = Path("/dev/shm")
#: The Python backend's process, one per model instance (a child of ``tritonserver``).
STUB_EXECUTABLE = "triton_python_backend_stub"


def free_ports(host: str, count: int) -> list[int]:
    """Ports the kernel hands out for ``host`` (all held until all are chosen, then freed)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def spawn(
    cmd: Sequence[str], env: dict[str, str], pump: Callable[[IO[bytes]], None]
) -> tuple[subprocess.Popen[bytes], threading.Thread]:
    """Start ``cmd`` (stdout and stderr to ``pump``); returns it and the thread that reads it.

    Raises :class:`TritonStartError` when it cannot be run.
    """
    # The process is spawned by the long-lived reader thread, not by the caller's thread:
    # PR_SET_PDEATHSIG fires when the *thread* that forked exits (an asyncio.to_thread
    # worker, say), and the reader thread lives exactly as long as the server's output.
    try:
        wrapped = dying_with_parent(cmd, signal.SIGTERM, path=env.get("PATH"))
    except FileNotFoundError as exc:
        raise TritonStartError(f"cannot run {cmd[0]}: {exc}") from None
    spawned = threading.Event()
    box: dict[str, subprocess.Popen[bytes] | BaseException] = {}

    def run() -> None:
        try:
            proc = subprocess.Popen(
                wrapped,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # own group: a terminal Ctrl-C does not reach it
            )
        except BaseException as exc:
            box["error"] = exc
            spawned.set()
            return
        box["proc"] = proc
        spawned.set()
        assert proc.stdout is not None
        pump(proc.stdout)

    reader = threading.Thread(target=run, name="tritonserver-log", daemon=True)
    reader.start()
    spawned.wait()
    if "error" in box:
        raise TritonStartError(f"cannot run {cmd[0]}: {box['error']}")
    proc = box["proc"]
    assert isinstance(proc, subprocess.Popen)
    return proc, reader


def stop(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM the server and wait; SIGKILL its process group after ``timeout_s``; then kill
    what is left of its group and reap it."""
    if not leader_exited(proc):
        LOG.info("stopping Triton (pid %s)", proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        if not _wait_leader(proc, timeout_s):
            # It holds no state: a kill loses nothing (the service stops it with a
            # 2 s budget, shorter than its models take to unload).
            LOG.info("Triton still stopping after %.0f s: killing its group", timeout_s)
            _killpg(proc.pid)
            _wait_leader(proc, 5.0)
    # The leader is a zombie (not reaped yet), so its group id cannot be reused:
    # kill stub processes it left behind (e.g. stopped while models were loading).
    leftovers = [p for p in group_members(proc.pid) if p != proc.pid]
    if leftovers:
        LOG.warning("killing processes Triton left behind: %s", leftovers)
        _killpg(proc.pid)
        end = time.monotonic() + 5.0
        while group_members(proc.pid) and time.monotonic() < end:
            time.sleep(0.05)
    proc.wait()
    LOG.info("Triton stopped (pid %s, exit code %s)", proc.pid, proc.returncode)


def remove_shared_memory(prefix: str) -> None:
    """Delete the ``/dev/shm`` regions whose names start with ``prefix``."""
    left = sorted(SHM_DIR.glob(f"{prefix}*"))
    for path in left:
        path.unlink(missing_ok=True)
    if left:
        LOG.info("removed %s leftover shared-memory regions", len(left))


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) of a process, or None when it is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2])


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None and stat[2] == pgid and stat[0] != "Z":
                members.append(int(entry.name))
    return members


def python_stubs(pgid: int) -> dict[int, str]:
    """The live Python-backend stubs in a server's process group: pid -> the model instance
    each serves (``lprnet_0_0``; the model's name if its command line does not say)."""
    stubs = {}
    for pid in group_members(pgid):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        args = [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]
        if not args or Path(args[0]).name != STUB_EXECUTABLE:
            continue
        # argv: the stub, <repository>/<model>/<version>/model.py, ..., <model>_<group>_<n>, ...
        model = Path(args[1]).parent.parent.name if len(args) > 1 else str(pid)
        stubs[pid] = next((a for a in args[2:] if a.startswith(f"{model}_")), model)
    return stubs


def member_alive(pid: int, pgid: int) -> bool:
    """Whether ``pid`` runs in process group ``pgid`` (gone, a zombie, or a reused pid in
    another group: False)."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] != "Z" and stat[2] == pgid


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie awaiting its reaper counts as gone)."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] != "Z"


def exit_code(proc: subprocess.Popen[bytes]) -> int | None:
    """Exit code (negative signal number if killed) of an exited server, without reaping it."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def leader_exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the server exited, without reaping it (its pid stays reserved)."""
    if proc.returncode is not None:
        return True
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _wait_leader(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for the server to exit (not reaping it); whether it did."""
    end = time.monotonic() + timeout_s
    while not leader_exited(proc):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _killpg(pgid: int) -> None:
    """SIGKILL a process group (nothing when it is gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
