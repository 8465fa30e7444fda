"""The stall watchdog of a camera's decode thread: no frame decoded for ``stall_timeout_s``.

FFmpeg's timeouts (streamer/ingest/decode.py) end a read that hangs, but not every stall:
packets may flow that never decode to a picture, and a read may stay stuck inside FFmpeg
despite the timeouts. ``container.close()`` from another thread while the decode thread is
inside ``av_read_frame`` does not unblock it (the read stays blocked) and frees the context
under it: unsafe. PyAV 18 exposes no user interrupt callback either. So the watchdog acts in
two steps (:class:`StallDetector`):

1. no progress for ``stall_timeout_s`` while connected (and not waiting on the queue or a
   pacing sleep): the stall is flagged; the decode loop checks the flag before each packet
   and reconnects;
2. the decode thread still has not come back after another ``stall_timeout_s`` (stuck inside
   FFmpeg): it is abandoned; a fresh decode thread reconnects, and the old one exits without
   touching the queue whenever FFmpeg lets it go.

:func:`watch` is the watchdog thread: it asks its owner to check, every
``min(1 s, stall_timeout_s / 4)``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Literal, NamedTuple

_LOG = logging.getLogger(__name__)

_WATCHDOG_MAX_INTERVAL_S = 1.0

#: Step 1, flag the stall (the decode thread reconnects); step 2, abandon the thread.
StallAction = Literal["reconnect", "abandon"]


class Stall(NamedTuple):
    """What :meth:`StallDetector.check` found: the action, and seconds since progress."""

    action: StallAction
    idle_s: float


class StallDetector:
    """Progress of one decode thread, and the two-step verdict on a stall.

    Times are ``time.monotonic()`` values passed in. Not locked: its owner calls
    :meth:`progress`, :meth:`reset`, :meth:`acknowledge` and :meth:`check` under its own
    lock; the decode thread reads :attr:`stalled` and marks its waits with :meth:`waiting`
    without it (a float and a bool).
    """

    def __init__(self, timeout_s: float, now: float) -> None:
        self.timeout_s = timeout_s
        self.last_progress = now
        self._waiting = False  # in a queue put or a pacing sleep: not a stall
        self._since: float | None = None  # when the stall was flagged

    @property
    def stalled(self) -> bool:
        """A stall is flagged and not yet acknowledged by the decode loop."""
        return self._since is not None

    def progress(self, now: float) -> None:
        """A frame was decoded or handed over."""
        self.last_progress = now

    def reset(self, now: float) -> None:
        """A session starts: progress now, no stall."""
        self.last_progress = now
        self._since = None

    def acknowledge(self) -> None:
        """The decode loop has ended the stalled session."""
        self._since = None

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Around a wait of the decode thread that is not a stall (the queue, pacing)."""
        self._waiting = True
        try:
            yield
        finally:
            self._waiting = False

    def check(self, now: float, *, connected: bool, stopping: bool) -> Stall | None:
        """The action due at ``now``, if any.

        ``"reconnect"`` once no progress was made for ``timeout_s`` while ``connected`` and
        not waiting; ``"abandon"`` when that stall is still not acknowledged ``timeout_s``
        later (and the owner is not ``stopping``). Each is returned once: a new stall starts
        after the abandon.
        """
        idle = now - self.last_progress
        if self._since is None:
            if not connected or self._waiting or idle <= self.timeout_s:
                return None
            self._since = now
            return Stall("reconnect", idle)
        if now - self._since > self.timeout_s and not stopping:
            self._since = None
            return Stall("abandon", idle)
        return None


def watch(check: Callable[[], None], stop: threading.Event, timeout_s: float, name: str) -> None:
    """The watchdog thread of camera ``name``: ``check()`` until ``stop``; never dies."""
    interval = min(_WATCHDOG_MAX_INTERVAL_S, timeout_s / 4)
    while not stop.wait(interval):
        try:
            check()
        except Exception:  # never let the watchdog die
            _LOG.exception("camera %s: watchdog check failed", name)
