"""Which camera sends the next frame to Triton, and how many frames may be at Triton at once.

Overload is normal: a CPU Triton serves about seven 1080p frames a second, a site asks for
five per camera. Two parts keep Triton's queue short while every camera keeps getting answers:

* :class:`AdaptiveWindow`: the number of frames in flight at one Triton endpoint (all cameras
  together), sized from the measured answer rate and latency, in the manner of Netflix's
  concurrency-limits (AIMD, Vegas). A frame in flight beyond what Triton runs in parallel only
  waits: it adds latency and no throughput. So the window climbs only while that buys
  throughput. While it is full, answers are counted in epochs; at the end of an epoch a
  larger window is tried (a *probe*, +25 %, at least one frame), and a probe is kept only if
  the answer rate rose by at least half as much as the window did; otherwise the window
  goes back and the next probe waits (10 s, doubling up to 5 minutes while probes keep
  failing, so that a window that fits costs almost nothing in probing). Independently, when
  the smoothed latency exceeds ``tolerance`` times the no-load latency (the fastest answer
  of the last minute), or a frame misses its deadline, the window shrinks by ``backoff``,
  at most once per round-trip: Triton slowed down, or others load it. On the embedded CPU
  Triton (two single-thread detector instances) it settles at 2; on a GPU it climbs as long
  as batching pays.
* :class:`FairScheduler`: permits for that window, given to the cameras that have a frame
  waiting in turn, by start-time fair queuing (each camera's share is proportional to its
  weight; a camera that was idle joins at the current virtual time, so it neither starves
  the others nor is starved). ``max_per_camera`` caps one camera's frames in flight.

A permit is held until Triton answers the frame or the stream is reset, never only until
its caller gave up: so what Triton holds is bounded by the window (see
streamer/inference/client.py, which owns the permits once a frame is sent). Pure asyncio, no I/O.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import math
import time
from dataclasses import dataclass, field

from streamer.config import TritonConfig

#: A probe tries this much more window (at least one frame) ...
PROBE_STEP = 0.25
#: ... and is kept when the answer rate grows by at least this share of the step.
PROBE_PAYBACK = 0.5
#: Answers per epoch, at least (and at least four windows' worth); a probe is judged sooner
#: (it makes frames wait while it runs): after half as many.
EPOCH_ANSWERS = 16
PROBE_HOLD_S = (10.0, 300.0)  # wait after a failed probe: first, most
#: Frames in flight before any latency is measured; the window grows from here.
INITIAL_WINDOW = 2


class AdaptiveWindow:
    """An in-flight limit that grows while it buys throughput and shrinks on latency.

    Not thread-safe (one event loop). ``now`` arguments are ``time.monotonic()`` seconds.
    """

    def __init__(
        self,
        *,
        initial: int,
        minimum: int,
        maximum: int,
        tolerance: float,
        backoff: float = 0.8,
        baseline_horizon_s: float = 60.0,
        smoothing: float = 0.2,
    ) -> None:
        if not 1 <= minimum <= maximum:
            raise ValueError(f"window: need 1 <= minimum <= maximum, got {minimum}, {maximum}")
        if not tolerance >= 1.0:
            raise ValueError(f"window: tolerance must be >= 1, got {tolerance}")
        if not 0.0 < backoff < 1.0:
            raise ValueError(f"window: backoff must be in (0, 1), got {backoff}")
        self.minimum = minimum
        self.maximum = maximum
        self.tolerance = tolerance
        self.backoff = backoff
        self.smoothing = smoothing
        self.baseline_horizon_s = baseline_horizon_s
        self._limit = min(max(initial, minimum), maximum)
        # (time, latency) with increasing latencies: the sliding minimum over the horizon.
        self._minima: collections.deque[tuple[float, float]] = collections.deque()
        self._smoothed: float | None = None
        self._last_decrease = -math.inf
        # The epoch: answers counted while the window was full, since when.
        self._epoch_start: float | None = None
        self._epoch_answers = 0
        self._rates: dict[int, float] = {}  # answers/s measured at each limit (latest epoch)
        self._probe_from: int | None = None  # the limit a running probe may return to
        self._hold_until = -math.inf
        self._hold_s = PROBE_HOLD_S[0]

    @property
    def limit(self) -> int:
        """Frames that may be in flight now (whole permits)."""
        return self._limit

    @property
    def no_load_latency_s(self) -> float | None:
        """The fastest answer within the horizon: what a frame costs when nothing waits."""
        return self._minima[0][1] if self._minima else None

    @property
    def smoothed_latency_s(self) -> float | None:
        return self._smoothed

    def on_answer(self, latency_s: float, in_flight: int, now: float | None = None) -> None:
        """One answer took ``latency_s``; ``in_flight`` counts it and the others still out."""
        now = time.monotonic() if now is None else now
        latency_s = max(latency_s, 1e-6)
        while self._minima and self._minima[-1][1] >= latency_s:
            self._minima.pop()
        self._minima.append((now, latency_s))
        while self._minima[0][0] < now - self.baseline_horizon_s:
            self._minima.popleft()
        if self._smoothed is None:
            self._smoothed = latency_s
        else:
            self._smoothed += self.smoothing * (latency_s - self._smoothed)
        baseline = self.no_load_latency_s or latency_s
        if self._smoothed > self.tolerance * baseline:
            self._decrease(now)
            return
        if in_flight < self._limit:
            # Demand, not the window, was the bound: this epoch says nothing about the window.
            self._epoch_start, self._epoch_answers = None, 0
            return
        if self._epoch_start is None:
            self._epoch_start = now
            return
        self._epoch_answers += 1
        elapsed = now - self._epoch_start
        needed = max(EPOCH_ANSWERS, 4 * self._limit)
        if self._probe_from is not None:
            needed //= 2
        if self._epoch_answers < needed or elapsed <= 0:
            return
        self._rates[self._limit] = self._epoch_answers / elapsed
        self._end_epoch(now)

    def on_overload(self, now: float | None = None) -> None:
        """A frame missed its deadline (or Triton refused it for load): shrink."""
        self._decrease(time.monotonic() if now is None else now)

    def _end_epoch(self, now: float) -> None:
        self._epoch_start, self._epoch_answers = now, 0
        if self._probe_from is not None:  # judge the probe
            start, self._probe_from = self._probe_from, None
            before, after = self._rates.get(start), self._rates[self._limit]
            grown = self._limit / start - 1.0
            if before is not None and after < before * (1.0 + PROBE_PAYBACK * grown):
                self._limit = start  # it only added waiting
                self._hold_until = now + self._hold_s
                self._hold_s = min(PROBE_HOLD_S[1], self._hold_s * 2)
                return
            self._hold_s = PROBE_HOLD_S[0]  # it paid: keep climbing
        if now >= self._hold_until and self._limit < self.maximum:
            self._probe_from = self._limit
            step = max(1, round(self._limit * PROBE_STEP))
            self._limit = min(self.maximum, self._limit + step)

    def _decrease(self, now: float) -> None:
        # At most once per round-trip: the answers of one crowded window are one signal.
        if now - self._last_decrease < (self._smoothed or 0.0):
            return
        self._last_decrease = now
        self._limit = max(self.minimum, min(self._limit - 1, int(self._limit * self.backoff)))
        self._probe_from = None
        self._epoch_start, self._epoch_answers = None, 0
        self._hold_until = now + self._hold_s


class Permit:
    """The right to have one frame of ``camera`` at Triton. Release exactly once (idempotent)."""

    __slots__ = ("_released", "_scheduler", "camera")

    def __init__(self, camera: str, scheduler: FairScheduler) -> None:
        self.camera = camera
        self._scheduler = scheduler
        self._released = False

    @property
    def released(self) -> bool:
        return self._released

    @property
    def scheduler(self) -> FairScheduler:
        """The scheduler (of one endpoint) that granted it."""
        return self._scheduler

    def release(self, latency_s: float | None = None, *, overloaded: bool = False) -> None:
        """Give the permit back; with the answer's latency when Triton answered."""
        if self._released:
            return
        self._released = True
        self._scheduler._released(self, latency_s, overloaded)


@dataclass
class _Camera:
    weight: float = 1.0
    held: int = 0
    finish_tag: float = 0.0
    granted: int = 0


@dataclass(order=True)
class _Waiter:
    start_tag: float
    seq: int
    camera: str = field(compare=False)
    future: asyncio.Future[Permit] = field(compare=False)


class FairScheduler:
    """Permits for one endpoint's :class:`AdaptiveWindow`, shared fairly between cameras."""

    def __init__(self, window: AdaptiveWindow, *, max_per_camera: int) -> None:
        if max_per_camera < 1:
            raise ValueError(f"scheduler: max_per_camera must be >= 1, got {max_per_camera}")
        self.window = window
        self.max_per_camera = max_per_camera
        self._cameras: dict[str, _Camera] = {}
        self._waiters: list[_Waiter] = []
        self._seq = itertools.count()
        self._virtual_time = 0.0
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        """Permits held now (frames waiting to be sent or at Triton)."""
        return self._in_flight

    @property
    def waiting(self) -> int:
        """Cameras with a frame waiting for a permit."""
        return len(self._waiters)

    def held(self, camera: str) -> int:
        entry = self._cameras.get(camera)
        return entry.held if entry else 0

    def granted(self, camera: str) -> int:
        """Permits given to ``camera`` so far."""
        entry = self._cameras.get(camera)
        return entry.granted if entry else 0

    def set_weight(self, camera: str, weight: float) -> None:
        if not weight > 0:
            raise ValueError(f"scheduler: weight of {camera} must be > 0, got {weight}")
        self._cameras.setdefault(camera, _Camera()).weight = weight

    def forget(self, camera: str) -> None:
        """A camera removed: drop its bookkeeping once it holds nothing."""
        entry = self._cameras.get(camera)
        if entry is not None and entry.held == 0:
            del self._cameras[camera]

    async def acquire(self, camera: str) -> Permit:
        """Wait for ``camera``'s turn under the window; cancellable while waiting."""
        entry = self._cameras.setdefault(camera, _Camera())
        start = max(self._virtual_time, entry.finish_tag)
        entry.finish_tag = start + 1.0 / entry.weight
        future: asyncio.Future[Permit] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(start, next(self._seq), camera, future)
        self._waiters.append(waiter)
        self._dispatch()  # granted at once when the window and the turn allow
        try:
            return await future
        except asyncio.CancelledError:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
                entry.finish_tag -= 1.0 / entry.weight  # its turn was never taken
            elif future.done() and not future.cancelled():
                future.result().release()  # granted as it was cancelled: hand it on
            raise

    def _grant(self, camera: str, entry: _Camera, start_tag: float) -> Permit:
        self._virtual_time = max(self._virtual_time, start_tag)
        entry.held += 1
        entry.granted += 1
        self._in_flight += 1
        return Permit(camera, self)

    def _released(self, permit: Permit, latency_s: float | None, overloaded: bool) -> None:
        in_flight = self._in_flight
        self._in_flight -= 1
        entry = self._cameras.get(permit.camera)
        if entry is not None:
            entry.held -= 1
        if overloaded:
            self.window.on_overload()
        elif latency_s is not None:
            self.window.on_answer(latency_s, in_flight)
        self._dispatch()

    def _dispatch(self) -> None:
        """Grant permits to the waiters with the smallest start tags, while the window allows."""
        while self._waiters and self._in_flight < self.window.limit:
            eligible = [
                w
                for w in self._waiters
                if self._cameras[w.camera].held < self.max_per_camera and not w.future.done()
            ]
            if not eligible:
                return
            waiter = min(eligible)
            self._waiters.remove(waiter)
            entry = self._cameras[waiter.camera]
            waiter.future.set_result(self._grant(waiter.camera, entry, waiter.start_tag))


def scheduler_for(config: TritonConfig) -> FairScheduler:
    """The fair, adaptive scheduler of one Triton endpoint, from the ``triton`` section."""
    window = AdaptiveWindow(
        initial=INITIAL_WINDOW,
        minimum=config.min_in_flight,
        maximum=config.max_in_flight,
        tolerance=config.latency_tolerance,
    )
    return FairScheduler(window, max_per_camera=config.max_in_flight_per_camera)
