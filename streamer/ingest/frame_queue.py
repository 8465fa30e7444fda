"""The bounded hand-off of frames from a camera's decode thread to the asyncio loop.

Usage::

    queue = FrameQueue(maxsize=2, policy="drop_oldest")
    # decode thread
    queue.put_threadsafe(frame, stop_event)
    queue.close()  # end of stream
    # asyncio task
    while (frame := await queue.get()) is not None:
        ...
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from typing import Literal, get_args

from streamer.domain.frames import Frame

QueuePolicy = Literal["drop_oldest", "wait"]
_POLICIES: tuple[str, ...] = get_args(QueuePolicy)
# A producer blocked by the "wait" policy is woken by get(), close() and wake_producers(); it
# also re-checks its stop event this often, in case the event was set by someone who did not
# call wake_producers().
_STOP_RECHECK_S = 0.5


class FrameQueue:
    """A bounded FIFO of :class:`Frame` from one thread to asyncio consumers.

    What happens when it is full is the ``policy``:

    * ``"drop_oldest"``: :meth:`put_threadsafe` never blocks. It evicts the *oldest waiting*
      frame (the stalest one, never the frame being put) and counts it in :attr:`dropped`, so
      a slow consumer always gets the newest frames and latency stays bounded by ``maxsize``.
      The frame put looks also where the evicted one did (its ``focus``): what moved in a
      dropped frame is still looked at. For live cameras.
    * ``"wait"``: nothing is ever dropped; :meth:`put_threadsafe` blocks the decode thread
      until there is room (or its stop event is set), so decoding runs at the consumer's
      pace. For files, where every sampled frame should be processed.

    :meth:`close` marks the end of the stream: frames already queued are still delivered,
    then :meth:`get` returns ``None``; later puts are refused.

    Thread-safety: the producer side (:meth:`put_threadsafe`, :meth:`close`,
    :meth:`wake_producers`) may be called from any thread; :meth:`get` from coroutines, on one
    or several event loops. A waiting consumer is woken with ``loop.call_soon_threadsafe``
    (only when one waits: no per-frame cross-thread call otherwise); nothing polls.
    """

    def __init__(self, maxsize: int, policy: QueuePolicy) -> None:
        if maxsize < 1:
            raise ValueError(f"FrameQueue: maxsize must be >= 1, got {maxsize}")
        if policy not in _POLICIES:
            raise ValueError(f"FrameQueue: policy must be one of {_POLICIES}, got {policy!r}")
        self._maxsize = maxsize
        self._policy: QueuePolicy = policy
        self._items: deque[Frame] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self._dropped = 0
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    # -- introspection

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @property
    def policy(self) -> QueuePolicy:
        return self._policy

    @property
    def dropped(self) -> int:
        """Frames evicted unread by the ``drop_oldest`` policy (always 0 with ``wait``)."""
        return self._dropped

    @property
    def closed(self) -> bool:
        return self._closed

    def qsize(self) -> int:
        with self._cond:
            return len(self._items)

    def __repr__(self) -> str:
        return (
            f"FrameQueue(maxsize={self._maxsize}, policy={self._policy!r}, "
            f"size={len(self._items)}, dropped={self._dropped}, closed={self._closed})"
        )

    # -- producer side (any thread)

    def put_threadsafe(self, frame: Frame, stop: threading.Event) -> bool:
        """Queue ``frame``; ``True`` when it was queued.

        ``False`` when the queue is closed, or (``wait`` policy) when ``stop`` was set while
        waiting for room; the frame is then discarded (and not counted as dropped).
        """
        with self._cond:
            if self._closed:
                return False
            if self._policy == "drop_oldest":
                evicted = []
                while len(self._items) >= self._maxsize:
                    evicted.append(self._items.popleft().focus)
                    self._dropped += 1
                if evicted:
                    frame = frame.looking_also_at(evicted)
            else:
                while len(self._items) >= self._maxsize:
                    if self._closed or stop.is_set():
                        return False
                    self._cond.wait(_STOP_RECHECK_S)
                if self._closed:
                    return False
            self._items.append(frame)
            self._wake_consumers_locked()
            return True

    def close(self) -> None:
        """End of stream: wake the consumers (they drain, then get ``None``) and producers."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._wake_consumers_locked()

    def wake_producers(self) -> None:
        """Wake producers blocked by the ``wait`` policy so that they re-check their stop event."""
        with self._cond:
            self._cond.notify_all()

    def _wake_consumers_locked(self) -> None:
        waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            # The loop may be closed already (a consumer that went away): nothing to wake.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, future)

    # -- consumer side (coroutines)

    def poll(self) -> Frame | None:
        """The oldest queued frame if there is one, else ``None``; never waits."""
        with self._cond:
            if not self._items:
                return None
            frame = self._items.popleft()
            self._cond.notify()
            return frame

    async def get(self) -> Frame | None:
        """The oldest queued frame; waits for one. ``None`` once closed and drained."""
        while await self.ready():
            frame = self.poll()
            if frame is not None:  # else another consumer took it first
                return frame
        return None

    async def ready(self) -> bool:
        """Waits until a frame is queued (True; it stays queued, :meth:`poll` takes it) or the
        queue is closed and drained (False). A consumer that must wait for something else
        before it sends a frame waits for that after this, then polls: the frame it sends is
        the newest, and it holds none while it waits."""
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                if self._items:
                    return True
                if self._closed:
                    return False
                future: asyncio.Future[None] = loop.create_future()
                self._waiters.append((loop, future))
            try:
                await future
            finally:
                # Woken: already removed. Cancelled: stop listening.
                with self._cond, contextlib.suppress(ValueError):
                    self._waiters.remove((loop, future))


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
