"""Which decoded frames a camera keeps, and when a file's kept frames are let go.

A :class:`Sampler` holds the sampling state of one session of a
:class:`~streamer.ingest.source.CameraSource` (a connection, or one pass over a file): each
frame's stream time, the slots of ``1 / sample_fps``, the realtime pacing clock and the check
that decides whether non-reference frames may stay undecoded. It is pure: it reads
timestamps and the monotonic times it is given, and says what to do; the source does it.

* Stream time: ``pts * time_base``; extrapolated from the previous frame at the stream rate
  when ``pts`` is missing (the first frame of an RTSP session may have ``pts=None``).
* Slots: a frame is kept when its stream time reaches the next slot; the first frame is
  always kept, a gap in the stream does not burst to catch up, and the slots restart when the
  stream time jumps back (a wrap, a splice, a file loop).
* Pacing (realtime files): each kept frame waits until its stream time, measured from an
  anchor; a jump further than a few seconds ahead or behind re-anchors instead of sleeping or
  bursting.
* Non-reference frames (B-frames) are worth skipping when the stream has at least
  ``_SKIP_MIN_RATIO`` frames per sampled one; if the reference frames alone then come slower
  than ``sample_fps`` x ``_SKIP_RATE_MARGIN`` over the first ``_SKIP_CHECK_S`` of stream time,
  the session decodes every frame again (decided once per session).
"""

from __future__ import annotations

import math
from fractions import Fraction

#: ``sample_fps`` that keeps every decoded frame (slots 0 s apart).
EVERY_FRAME = math.inf
_DEFAULT_RATE = 25.0  # frames per second assumed when a stream declares none
_PACE_MAX_AHEAD_S = 5.0  # realtime pacing: a pts jump further ahead re-anchors the clock
_PACE_MAX_BEHIND_S = 1.0  # realtime pacing: this far behind, re-anchor instead of bursting
# Non-reference frames are skipped when the stream has at least this many frames per sampled
# one, and decoded again when what remains comes slower than sample_fps x the margin.
_SKIP_MIN_RATIO = 2.0
_SKIP_CHECK_S = 2.0
_SKIP_RATE_MARGIN = 1.2


class Sampler:
    """The sampling state of one session at ``sample_fps`` of a stream at ``stream_rate``.

    ``stream_rate``: the frame rate the stream declares (None: ``_DEFAULT_RATE``), used to
    extrapolate missing timestamps and to decide on skipping non-reference frames, which is
    asked for with ``skip_non_reference``.
    """

    def __init__(
        self, sample_fps: float, stream_rate: float | None, *, skip_non_reference: bool
    ) -> None:
        self.sample_fps = float(sample_fps)
        self.rate = stream_rate or _DEFAULT_RATE
        self.period = 1.0 / self.sample_fps
        self.slot_tolerance = min(1e-3, self.period / 10)
        #: Frames decoded in this session.
        self.frames = 0
        #: Whether the session skips non-reference frames (set once a check finds too few).
        self.skipping_non_reference = (
            skip_non_reference and self.sample_fps * _SKIP_MIN_RATIO <= self.rate
        )
        self._last_t: float | None = None
        self._next_slot: float | None = None
        self._pace_anchor: tuple[float, float] | None = None  # (stream time, monotonic)
        # While skipping, until decided: the stream time the check started at, frames since.
        self._skip_since: tuple[float, int] | None = (
            (-math.inf, 0) if self.skipping_non_reference else None
        )

    def stream_time(self, pts: int | None, time_base: Fraction | None) -> float:
        """Count one decoded frame; its stream time in seconds."""
        self.frames += 1
        if pts is not None and time_base is not None:
            t = float(pts * time_base)
        elif self._last_t is not None:
            t = self._last_t + 1.0 / self.rate
        else:
            t = (self.frames - 1) / self.rate
        if self._last_t is not None and t + self.slot_tolerance < self._last_t:
            self._next_slot = None  # time went back (wrap, splice): restart the slots
            self._pace_anchor = None
        self._last_t = t
        return t

    def keep(self, t: float) -> bool:
        """Whether the frame at stream time ``t`` fills the next slot (then it is taken)."""
        if self._next_slot is not None and t < self._next_slot - self.slot_tolerance:
            return False
        slot = t if self._next_slot is None else self._next_slot
        self._next_slot = slot + self.period
        if self._next_slot <= t:  # a gap in the stream: do not burst to catch up
            self._next_slot = t + self.period
        return True

    def pace(self, t: float, now: float) -> float:
        """Seconds a kept frame at stream time ``t`` waits, at monotonic time ``now``, to be
        let go at its pace (0: at once; the first frame and a jump re-anchor the clock)."""
        if self._pace_anchor is None:
            self._pace_anchor = (t, now)
            return 0.0
        anchor_t, anchor_mono = self._pace_anchor
        delay = anchor_mono + (t - anchor_t) - now
        if delay > _PACE_MAX_AHEAD_S or delay < -_PACE_MAX_BEHIND_S:
            self._pace_anchor = (t, now)
            return 0.0
        return max(0.0, delay)

    def reference_rate_too_low(self, t: float) -> float | None:
        """While skipping non-reference frames, the rate (fps) of what remains once it is
        measured too low for ``sample_fps``: every frame must be decoded again from now on.

        A stream's reference frames (I and P) may be too sparse to sample from (say, three
        B-frames between P-frames at 15 fps leaves 3.75 fps): measured over the first
        ``_SKIP_CHECK_S`` of stream time, with a margin, and decided once per session. None
        while measuring, when the rate is enough, and when not skipping.
        """
        if self._skip_since is None:
            return None
        since, frames = self._skip_since
        if since == -math.inf:
            self._skip_since = (t, 0)
            return None
        frames += 1
        if t - since < _SKIP_CHECK_S:
            self._skip_since = (since, frames)
            return None
        self._skip_since = None  # decided for this session
        rate = frames / (t - since)
        if rate < self.sample_fps * _SKIP_RATE_MARGIN:
            self.skipping_non_reference = False
            return rate
        return None
