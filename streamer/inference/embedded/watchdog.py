"""The embedded Triton brought back when it dies.

``watch(server)`` is a supervised part (streamer/pipeline/supervisor.py): every
``CHECK_S`` it looks whether the ``tritonserver`` process and each of its
Python-backend stubs still run. When the server has died (killed, crashed, out
of memory), or one of its stubs has (Triton does not restart a stub: every
request to that model fails from then on, while Triton says it is ready), it
logs why at ERROR, stops what is left of it (its stubs, their shared memory,
the zombie) and starts it again on the same ports, so the inference stream
reconnects to the same address and the cameras resume. A start that fails raises: the supervisor
retries with its backoff. While it is down ``state`` says ``restarting`` and
``/readyz`` is not ready.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Literal

from streamer.inference.embedded.server import EmbeddedTriton

LOG = logging.getLogger(__name__)

#: How often the server process is looked at.
CHECK_S = 1.0


class TritonWatchdog:
    """Restarts an embedded Triton whose process or one of whose stubs died; ``restarts``
    counts the attempts."""

    def __init__(self, server: EmbeddedTriton, check_s: float = CHECK_S) -> None:
        self.server = server
        self.check_s = check_s
        self.restarts = 0
        self.state: Literal["running", "restarting"] = "running"

    async def watch(self) -> None:
        """Run until cancelled; raises when a restart fails (the supervisor retries)."""
        while True:
            if not self.server.running:
                await self._restart(
                    f"the embedded Triton (pid {self.server.pid}) died "
                    f"(exit code {self.server.exit_code})"
                )
            elif dead := self.server.dead_stubs:
                await self._restart(
                    f"the Python-backend stub of {', '.join(dead)} in the embedded Triton "
                    f"(pid {self.server.pid}) died, and Triton does not start it again"
                )
            await asyncio.sleep(self.check_s)

    async def _restart(self, why: str) -> None:
        if self.state == "restarting":  # the last attempt failed (the supervisor waited)
            LOG.warning("starting the embedded Triton again (attempt %d)", self.restarts + 1)
        else:
            self.state = "restarting"
            tail = " | ".join(self.server.log_tail(5))
            LOG.error("%s; restarting it. Its last lines: %s", why, tail or "(none)")
        self.restarts += 1
        await asyncio.to_thread(self.server.restart)
        self.state = "running"
        LOG.warning(
            "the embedded Triton is back (pid %s, restart %d)", self.server.pid, self.restarts
        )
