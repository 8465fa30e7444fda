"""Children that die with us: :func:`dying_with_parent` wraps a command so that the process
gets a signal when the thread that started it (or our whole process) dies.

Linux's ``PR_SET_PDEATHSIG`` must be set in the child, between fork and exec. Doing that with
``subprocess.Popen(preexec_fn=...)`` runs Python code in the forked child of a process that has
threads (gRPC, asyncio's executors, the server's log reader), which the Python documentation
warns can deadlock or crash: a forked child died once with "Fatal Python error: Segmentation
fault" here. So the child is instead a small, fresh interpreter (``python -I -c``, about 20 ms)
that sets the signal and ``exec``\\ s the command, and ``Popen`` keeps its safe fork-exec path.
(util-linux ``setpriv --pdeathsig`` does the same, but is not in every image.)

The signal is bound to the *thread* that forked: spawn from a thread that lives as long as
the child should.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Sequence

#: Run as ``python -I -c _WRAPPER <parent pid> <signal> <command...>``. If the parent died
#: between the fork and ``prctl``, the child has a new parent already and exits instead.
_WRAPPER = """
import ctypes, os, sys
parent, sig, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
ctypes.CDLL(None, use_errno=True).prctl(1, sig, 0, 0, 0)  # 1: PR_SET_PDEATHSIG
if os.getppid() != parent:
    sys.exit(1)
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    print(f"cannot run {argv[0]}: {exc}", file=sys.stderr, flush=True)
    sys.exit(127)
"""


def dying_with_parent(
    cmd: Sequence[str], sig: signal.Signals = signal.SIGTERM, path: str | None = None
) -> list[str]:
    """``cmd`` wrapped so that it gets ``sig`` when its parent dies; ``Popen`` it as is.

    Raises :class:`FileNotFoundError` when ``cmd[0]`` is not an executable file (found on
    ``path``, the child's ``PATH``, or ours), so that the caller can say so before spawning.
    """
    if not cmd:
        raise ValueError("no command")
    search = path if path is not None else os.environ.get("PATH", os.defpath)
    if shutil.which(cmd[0], path=search) is None:
        raise FileNotFoundError(f"no executable {cmd[0]!r}")
    return [sys.executable, "-I", "-c", _WRAPPER, str(os.getpid()), str(int(sig)), *cmd]
