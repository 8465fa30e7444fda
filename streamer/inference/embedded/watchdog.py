"""The embedded Triton brought back when it dies.

``watch(server)`` is a supervised part (streamer/pipeline/supervisor.py): every
``CHECK_S`` it looks whether the ``tritonserver`` process still runs. When it
has died (killed, crashed, out of memory) it logs why at ERROR, stops what is
left of it (its Python-backend stubs, their shared memory, the zombie) and
starts it again on the same ports, so the inference stream reconnects to the
same address and the cameras resume. A start that fails raises: the supervisor
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
    """Restarts an embedded Triton whose process died; ``restarts`` counts the attempts."""

    def __init__(self, server: EmbeddedTriton, check_s: float = CHECK_S) -> None:
        self.server = server
        self.check_s = check_s
        self.restarts = 0
        self.state: Literal["running", "restarting"] = "running"

    async def watch(self) -> None:
        """Run until cancelled; raises when a restart fails (the supervisor retries)."""
        while True:
            if not self.server.running:
                await self._restart()
            await asyncio.sleep(self.check_s)

    async def _restart(self) -> None:
        if self.state == "restarting":  # the last attempt failed (the supervisor waited)
            LOG.warning("starting the embedded Triton again (attempt %d)", self.restarts + 1)
        else:
            self.state = "restarting"
            tail = " | ".join(self.server.log_tail(5))
            LOG.error(
                "the embedded Triton (pid %s) died (exit code %s); restarting it. "
                "Its last lines: %s",
                self.server.pid,
                self.server.exit_code,
                tail or "(none)",
            )
        self.restarts += 1
        await asyncio.to_thread(self.server.restart)
        self.state = "running"
        LOG.warning(
            "the embedded Triton is back (pid %s, restart %d)", self.server.pid, self.restarts
        )
