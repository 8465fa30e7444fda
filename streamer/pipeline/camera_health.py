"""A camera's health as the page and the API say it: rates measured lately, and words.

The configured ``sample_fps`` says what a camera asks for; what it gets is the rate at which
inference answered its frames, and the rate at which frames were dropped unanswered (the
queue evicted them, or inference failed). :class:`RateMeter` measures both over the last
``WINDOW_S``, from the counters, when the status is read; :func:`describe` puts the state and
those rates in one line.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

#: Seconds the rates are measured over.
WINDOW_S = 10.0
#: Readings closer together than this are not kept (the page polls every second).
_MIN_STEP_S = 0.5
#: Below this many drops a second, a camera is not said to be behind.
_BEHIND_FPS = 0.05


@dataclass(frozen=True)
class Rates:
    answered_fps: float
    dropped_fps: float


class RateMeter:
    """Rates of two counters over the last :data:`WINDOW_S` seconds (one reading kept older
    than the window, so a rare reader still gets a rate). Made with the counters, at zero:
    the first reading gives the rates since then."""

    def __init__(self, window_s: float = WINDOW_S, now: float | None = None) -> None:
        self.window_s = window_s
        start = time.monotonic() if now is None else now
        self._readings: deque[tuple[float, int, int]] = deque([(start, 0, 0)])

    def read(self, answered: int, dropped: int, now: float | None = None) -> Rates:
        now = time.monotonic() if now is None else now
        readings = self._readings
        if now - readings[-1][0] >= _MIN_STEP_S:
            readings.append((now, answered, dropped))
        while len(readings) > 2 and now - readings[1][0] >= self.window_s:
            readings.popleft()
        then, answered_then, dropped_then = readings[0]
        span = now - then
        if span <= 0:
            return Rates(0.0, 0.0)
        return Rates(
            round(max(0, answered - answered_then) / span, 2),
            round(max(0, dropped - dropped_then) / span, 2),
        )


def describe(state: str, rates: Rates, sample_fps: float, last_error: str | None) -> str:
    """The camera's health in one line (``state``: CameraStats.state)."""
    if state == "starting":
        return "starting: opening the stream"
    if state == "reconnecting":
        return f"reconnecting: {last_error}" if last_error else "reconnecting"
    if state == "ended":
        return "ended: the file was read to its end"
    if state == "stopped":
        return "stopped"
    words = f"live: {rates.answered_fps:.1f} of {sample_fps:g} frames/s answered"
    if rates.dropped_fps >= _BEHIND_FPS:
        return f"{words}; {rates.dropped_fps:.1f} frames/s dropped (inference is behind)"
    if rates.answered_fps < 0.5 * sample_fps:
        return f"{words} (frames without motion are skipped)"
    return words
