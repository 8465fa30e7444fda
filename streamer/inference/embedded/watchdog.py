"""The embedded Triton brought back when it dies.

``watch(server)`` is a supervised part (streamer/foundation/supervisor.py): every
``CHECK_S`` it looks whether the ``tritonserver`` process and each of its
Python-backend stubs still run. When the server has died (killed, crashed, out
of memory), or one of its stubs has (Triton does not restart a stub: every
request to that model fails from then on, while Triton says it is ready), it
logs why at ERROR, stops what is left of it (its stubs, their shared memory,
the zombie) and starts it again on the same ports, so the inference stream
reconnects to the same address and the cameras resume. A stub that hangs
(alive, but no longer answering Triton) is seen through the model's errors:
when Triton has answered every frame for ``UNHEALTHY_STUB_RESTART_S`` with
"Stub process '...' is not healthy", the server is restarted too. A start that
fails raises: the supervisor retries with its backoff. While it is down
``state`` says ``restarting`` and ``/readyz`` is not ready.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from typing import Literal

from streamer.inference.embedded.server import EmbeddedTriton
from streamer.inference.model_errors import ModelErrors

LOG = logging.getLogger(__name__)

#: How often the server process is looked at.
CHECK_S = 1.0
#: How long the model may fail because Triton says a stub "is not healthy" before the server
#: is restarted (also the least time between two such restarts).
UNHEALTHY_STUB_RESTART_S = 30.0
#: How long a server being restarted gets to exit on SIGTERM before its group is killed.
RESTART_STOP_TIMEOUT_S = 1.0
_UNHEALTHY_STUB = re.compile(r"Stub process '([^']+)' is not healthy")


class TritonWatchdog:
    """Restarts an embedded Triton whose process or one of whose stubs died; ``restarts``
    counts the attempts."""

    def __init__(
        self,
        server: EmbeddedTriton,
        check_s: float = CHECK_S,
        model_errors: Callable[[], ModelErrors | None] = lambda: None,
        unhealthy_restart_s: float = UNHEALTHY_STUB_RESTART_S,
    ) -> None:
        self.server = server
        self.check_s = check_s
        #: The model's errors at this server (None until the inference client exists).
        self.model_errors = model_errors
        self.unhealthy_restart_s = unhealthy_restart_s
        self.restarts = 0
        self.state: Literal["running", "restarting"] = "running"
        self._restarted_at = time.monotonic()  # the start counts: a new server gets its time

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
            elif (hung := self._unhealthy_stub()) is not None:
                await self._restart(
                    f"the embedded Triton (pid {self.server.pid}) has answered every frame "
                    f"for {self.unhealthy_restart_s:g} s with: Stub process '{hung}' is not "
                    "healthy"
                )
            await asyncio.sleep(self.check_s)

    def _unhealthy_stub(self) -> str | None:
        """The stub Triton has said "is not healthy" of, in every answer for
        ``unhealthy_restart_s`` since the later of the errors' start and the last restart,
        the latest answer coming from the server running now; else None."""
        errors = self.model_errors()
        since = errors.failing_since if errors is not None else None
        if errors is None or since is None or errors.last_at <= self._restarted_at:
            return None  # not failing, or its last error came from the server before
        if time.monotonic() - max(since, self._restarted_at) < self.unhealthy_restart_s:
            return None
        found = _UNHEALTHY_STUB.search(errors.last or "")
        return found[1] if found else None

    async def _restart(self, why: str) -> None:
        if self.state == "restarting":  # the last attempt failed (the supervisor waited)
            LOG.warning("starting the embedded Triton again (attempt %d)", self.restarts + 1)
        else:
            self.state = "restarting"
            tail = " | ".join(self.server.log_tail(5))
            LOG.error("%s; restarting it. Its last lines: %s", why, tail or "(none)")
        self.restarts += 1
        self._restarted_at = time.monotonic()
        # A server with a dead or hung stub fails the requests it holds anyway: it is not
        # given the graceful stop's 10 s to finish them (it holds no other state).
        await asyncio.to_thread(self.server.restart, RESTART_STOP_TIMEOUT_S)
        self._restarted_at = time.monotonic()
        self.state = "running"
        LOG.warning(
            "the embedded Triton is back (pid %s, restart %d)", self.server.pid, self.restarts
        )
