"""Parts that restart themselves: each long-lived part of the service runs supervised.

A part is a coroutine function, run as a task. When it raises, the supervisor
logs it once, at ERROR with its traceback, marks it ``restarting``, waits a
capped exponential backoff (``backoff_s``, doubled per consecutive crash up to
``max_backoff_s``; a run that lasted ``stable_s`` resets it) and runs it again.
A part that returns has ``ended`` (a file camera at its end) and is not run
again. ``stop()`` cancels the parts and awaits them. The parts' states are what
``/readyz`` and the ``lpr_part_*`` metrics report; a part that crashed
``CRASH_LOOP`` times in a row makes ``/healthz`` fail.

Why not a library: aiotools and aiomisc supervise tasks, but neither keeps a
per-part state and restart count for health endpoints, and both bring their own
event-loop conventions; this is 100 lines over ``asyncio.Task``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from streamer.foundation.backoff import backoff_ceiling

LOG = logging.getLogger(__name__)

#: First wait before a crashed part runs again; doubled per consecutive crash...
BACKOFF_S = 1.0
#: ...up to this.
MAX_BACKOFF_S = 30.0
#: A run this long without a crash resets the backoff.
STABLE_S = 60.0
#: Crashes in a row (none of them after a stable run) that make a crash loop: the process
#: cannot make progress by itself, and ``/healthz`` says so (an orchestrator restarts it).
CRASH_LOOP = 5

PartStateName = Literal["running", "restarting", "ended", "stopped"]


@dataclass
class PartState:
    """What a supervised part is doing, for health endpoints and metrics."""

    name: str
    state: PartStateName = "running"
    restarts: int = 0
    last_error: str | None = None
    #: Crashes since the last stable run.
    crashes: int = 0

    @property
    def crash_loop(self) -> bool:
        return self.crashes >= CRASH_LOOP

    def to_dict(self) -> dict[str, object]:
        return {"state": self.state, "restarts": self.restarts, "last_error": self.last_error}


class Supervisor:
    """Runs named parts and restarts those that crash (see the module docstring)."""

    def __init__(
        self,
        *,
        backoff_s: float = BACKOFF_S,
        max_backoff_s: float = MAX_BACKOFF_S,
        stable_s: float = STABLE_S,
    ) -> None:
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.stable_s = stable_s
        self.parts: dict[str, PartState] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, run: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run ``run()`` as the part ``name``, restarting it when it raises."""
        if name in self._tasks and not self._tasks[name].done():
            raise RuntimeError(f"part {name!r} is already running")
        state = PartState(name)
        self.parts[name] = state
        task = asyncio.create_task(self._supervise(state, run), name=f"part-{name}")
        self._tasks[name] = task
        return task

    def crash_looping(self) -> list[str]:
        """Parts that crashed ``CRASH_LOOP`` times in a row."""
        return [name for name, part in self.parts.items() if part.crash_loop]

    def backoff(self, crashes: int) -> float:
        """The wait before the next run after ``crashes`` consecutive crashes (>= 1): the
        backoff's ceiling, no jitter (one process restarts its own parts)."""
        return backoff_ceiling(crashes, self.backoff_s, self.max_backoff_s)

    def task(self, name: str) -> asyncio.Task[None] | None:
        return self._tasks.get(name)

    async def stop(self, name: str | None = None) -> None:
        """Cancel the part ``name`` (every part if None) and wait until it has finished."""
        names = [name] if name is not None else list(self._tasks)
        tasks = [self._tasks.pop(n) for n in names if n in self._tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for n in names:
            if n in self.parts and self.parts[n].state != "ended":
                self.parts[n].state = "stopped"

    async def remove(self, name: str) -> None:
        """Stop the part ``name`` and forget it (a camera removed by a reload)."""
        await self.stop(name)
        self.parts.pop(name, None)

    async def _supervise(self, state: PartState, run: Callable[[], Awaitable[None]]) -> None:
        while True:
            state.state = "running"
            started = time.monotonic()
            try:
                await run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if time.monotonic() - started >= self.stable_s:
                    state.crashes = 0
                state.crashes += 1
                delay = self.backoff(state.crashes)
                state.restarts += 1
                state.last_error = f"{type(exc).__name__}: {exc}"[:500]
                state.state = "restarting"
                LOG.error(
                    "%s crashed (restart %d in %.0f s)",
                    state.name,
                    state.restarts,
                    delay,
                    exc_info=exc,
                )
                await asyncio.sleep(delay)
                continue
            state.state = "ended"
            return
