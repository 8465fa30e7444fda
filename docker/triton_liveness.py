#!/usr/bin/env python3
"""Liveness of a Triton serving Python-backend models: live, and no Python-backend stub dead.

    python3 triton_liveness.py [--url http://127.0.0.1:8000] [--pid PID] [--timeout S]

Triton 2.51 (24.10) does not start a Python-backend stub again when it dies (killed by the
out-of-memory killer, a crash in a library): every request to that model fails from then on
("Stub process 'lprnet_0_0' is not healthy"), while ``/v2/health/live`` and
``/v2/health/ready`` keep answering 200 (triton-inference-server/server#8604, #7862). A dead
stub stays a zombie child of ``tritonserver`` (Triton never reaps it), which is what this
check looks for, in ``/proc``. Use it as the liveness probe (Kubernetes ``exec``, Docker
``HEALTHCHECK``) so that the orchestrator restarts such a server; the streamers meanwhile
move their cameras to the other Tritons (``/readyz`` names the failing model).

Exit 0: live, no dead stub. Exit 1: one line on stdout saying why. Standard library only:
it runs with the Triton image's own ``python3``.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request

#: ``comm`` of a stub process: ``triton_python_backend_stub`` cut to 15 characters by Linux.
STUB_COMM = "triton_python_backend_stub"[:15]
SERVER_COMM = "tritonserver"


def processes(proc: str = "/proc") -> list[tuple[int, str, str, int]]:
    """(pid, comm, state, ppid) of every process visible in ``proc``."""
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc, entry, "stat")) as stat:
                data = stat.read()
        except OSError:  # gone meanwhile
            continue
        comm = data[data.index("(") + 1 : data.rindex(")")]
        state, ppid = data[data.rindex(")") + 2 :].split()[:2]
        found.append((int(entry), comm, state, int(ppid)))
    return found


def dead_stubs(server_pid: int | None = None, proc: str = "/proc") -> list[tuple[int, int]]:
    """(stub pid, server pid) of each dead (zombie) stub of ``server_pid``, or of any
    ``tritonserver`` when None."""
    table = processes(proc)
    servers = {pid for pid, comm, _, _ in table if comm == SERVER_COMM}
    if server_pid is not None:
        servers = {server_pid}
    return [
        (pid, ppid)
        for pid, comm, state, ppid in table
        if comm == STUB_COMM and state == "Z" and ppid in servers
    ]


def problem(url: str, server_pid: int | None, timeout_s: float) -> str | None:
    """Why the Triton is not live, in one line; None when it is."""
    dead = dead_stubs(server_pid)
    if dead:
        pids = ", ".join(f"pid {stub} of tritonserver {server}" for stub, server in dead)
        return (
            f"a Python-backend stub died ({pids}): Triton does not start it again and its "
            "model fails every request; restart the server"
        )
    live = url.rstrip("/") + "/v2/health/live"
    try:
        with urllib.request.urlopen(live, timeout=timeout_s) as response:
            if response.status != 200:
                return f"{live} answered {response.status}"
    except (urllib.error.URLError, OSError) as exc:
        return f"{live}: {exc}"
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--url",
        default="http://127.0.0.1:8000",
        help="the server's HTTP address (default: %(default)s)",
    )
    parser.add_argument(
        "--pid",
        type=int,
        default=None,
        help="look at this tritonserver only (default: every one this process can see)",
    )
    parser.add_argument(
        "--timeout", type=float, default=3.0, help="seconds for the HTTP check (default: 3)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    why = problem(args.url, args.pid, args.timeout)
    if why is not None:
        print(f"not live: {why}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
