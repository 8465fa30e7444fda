"""From per-frame plate reads of one camera to one decision per vehicle pass.

``PassDetector`` feeds each ``FrameResult`` into a ``PlateTracker``, gives
every track a ``PlateVote`` and reports a track once, as a ``PlatePass``, at
the first of:

- ``confident``: the vote is valid, supported by ``confident_reads`` reads,
  at least ``confident_share`` sure, and its reads span ``confident_span_s``;
- ``max_delay``: ``max_delay_s`` have passed since the track was first seen;
- ``track_ended``: the track was unseen for the tracker's buffer;
- ``flush``: the stream ended (``flush()``) or its time went backwards;

and only if the vote is then valid with at least ``min_reads`` reads equal to
it. A track that does not qualify at ``max_delay_s`` is reported as soon as
it does, or never. The same text is reported at most once per
``dedup_window_s`` on this camera.

Why ``confident_span_s``: consecutive frames are not independent evidence.
A plate that is misread in one frame is usually misread the same way in the
next ones (same pose, light and blur): the sample clip's parked car reads
``C567AM76`` in 17 frames running at 15 fps before reading ``O567AM76`` for
the next hundred. Ten agreeing reads take 0.7 s at 15 fps but 2 s at 5 fps;
asking that the agreement also hold over a span of stream time makes an early
decision mean the same at any frame rate.

Stream time is ``Frame.pts_s``, made monotonic per camera: when it jumps
backwards (reconnect, file loop) every track is flushed and time continues
from the last one, plus the decode-time (``Frame.monotonic``) gap between the
two frames, so deduplication keeps working across the jump.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from streamer.frames import Frame, FrameResult, PlateReading
from streamer.plate_formats import PlateFormats
from streamer.tracker import PlateTracker, TrackerParams
from streamer.vote import PlateVote, VoteResult

#: Image of a pass's ``first_seen`` / ``last_seen`` frames: only ``best_frame`` keeps pixels.
_NO_IMAGE = np.zeros((0, 0, 3), dtype=np.uint8)
_NO_IMAGE.flags.writeable = False


#: Why a pass was reported (see the module docstring).
PassReason = Literal["confident", "track_ended", "max_delay", "flush"]


@dataclass(frozen=True, slots=True)
class TrackedPlate:
    """A plate of the latest frame as the live view shows it."""

    box: tuple[float, float, float, float]
    text: str  # the track's voted text when it is a valid plate, else this frame's read
    track_id: int | None  # None: not (yet) associated with a track
    confirmed: bool


@dataclass(frozen=True, slots=True)
class PassParams:
    """When a tracked plate is reported.

    ``min_reads``: reads exactly equal to the voted text needed to report at
    all; the guard against a consensus no frame showed. ``confident_reads`` /
    ``confident_share`` / ``confident_span_s``: an early report needs this
    many reads within one edit of the text, this least per-position share, and
    reads spanning this many stream seconds; higher means later but surer.
    ``max_delay_s``: after this long since a track was first seen it is
    reported as soon as it qualifies, confident or not. ``dedup_window_s``:
    the same text is not reported twice on a camera within this many seconds.
    """

    min_reads: int = 2
    confident_reads: int = 10
    confident_share: float = 0.8
    confident_span_s: float = 2.0
    max_delay_s: float = 6.0
    dedup_window_s: float = 300.0

    def __post_init__(self) -> None:
        if self.min_reads < 1:
            raise ValueError(f"min_reads must be >= 1, got {self.min_reads}")
        if self.confident_reads < 1:
            raise ValueError(f"confident_reads must be >= 1, got {self.confident_reads}")
        if not 0.0 <= self.confident_share <= 1.0:
            raise ValueError(f"confident_share must be in [0, 1], got {self.confident_share}")
        for name in ("confident_span_s", "max_delay_s", "dedup_window_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value}")


@dataclass(frozen=True, slots=True)
class PlatePass:
    """One vehicle pass: the decision for one track.

    ``first_seen`` / ``last_seen``: the frames of the track's first and latest
    read when it was decided, without their pixels (``image`` is empty);
    ``best`` / ``best_frame``: the read with the highest ``text_score *
    det_score`` and its frame, image included. ``time_s``: the camera's
    monotonic stream time of the decision.
    """

    camera: str
    track_id: int
    text: str
    confidence: float
    candidates: tuple[tuple[str, float], ...]
    reads: int
    support: int
    exact: int
    first_seen: Frame
    last_seen: Frame
    best: PlateReading
    best_frame: Frame
    reason: PassReason
    time_s: float


@dataclass(slots=True)
class _TrackState:
    vote: PlateVote
    first_t: float
    first_seen: Frame
    last_seen: Frame
    best: PlateReading
    best_frame: Frame
    best_weight: float
    confirmed: bool = False


def _without_image(frame: Frame) -> Frame:
    return dataclasses.replace(frame, pixels=_NO_IMAGE)


class PassDetector:
    """Vehicle passes of one camera; feed it every processed frame in order.

    ``suppressed`` counts the passes not reported because the same text was
    reported within ``dedup_window_s``.
    """

    def __init__(
        self,
        camera: str,
        tracker: TrackerParams | None = None,
        passes: PassParams | None = None,
        formats: PlateFormats | None = None,
        min_text_score: float = 0.5,
    ) -> None:
        self.camera = camera
        self.params = passes or PassParams()
        self.formats = formats or PlateFormats()
        self.min_text_score = min_text_score
        self.suppressed = 0
        self.last_tracked: tuple[TrackedPlate, ...] = ()
        self._tracker = PlateTracker(tracker)
        self._tracks: dict[int, _TrackState] = {}
        self._reported: set[int] = set()  # live tracks already decided
        self._last_text_t: dict[str, float] = {}  # text -> stream time it was last reported
        self._offset = 0.0  # stream time = pts_s + offset
        self._last: Frame | None = None
        self._t = -math.inf

    @property
    def active_tracks(self) -> int:
        """Confirmed tracks alive now (for the ``lpr_active_tracks`` gauge)."""
        return sum(1 for tid in self._tracker.track_ids if self._tracker.is_confirmed(tid))

    @property
    def live_tracks(self) -> int:
        """Tracks alive now, tentative ones included (the motion gate's "live track"): a
        vehicle seen once just before it stopped is still re-read."""
        return len(self._tracker.track_ids)

    def update(self, result: FrameResult) -> list[PlatePass]:
        """Process one frame's reads; returns the passes decided at this frame."""
        frame = result.frame
        if frame.camera != self.camera:
            raise ValueError(
                f"frame of camera {frame.camera!r} given to the pass detector of {self.camera!r}"
            )
        if not math.isfinite(frame.pts_s):
            raise ValueError(f"frame {frame.index}: pts_s must be finite, got {frame.pts_s}")
        passes: list[PlatePass] = []
        if self._last is not None and frame.pts_s + self._offset < self._t:
            # A new segment: nothing tracked before it continues into it.
            passes += self._end_all("flush")
            gap = max(frame.monotonic - self._last.monotonic, 0.0)
            self._offset = self._t + gap - frame.pts_s
        t = frame.pts_s + self._offset
        self._t = t
        self._last = frame

        plates = result.plates
        boxes = np.array([p.box for p in plates], dtype=np.float64).reshape(-1, 4)
        scores = np.array([p.det_score for p in plates], dtype=np.float64)
        update = self._tracker.update(t, boxes, scores)

        for tid in update.dropped:
            self._tracks.pop(tid, None)
        for det, tid in update.assignments:
            if tid not in self._reported:
                self._add_read(tid, frame, plates[det], t)
        for tid in update.confirmed:
            if tid in self._tracks:
                self._tracks[tid].confirmed = True
        self.last_tracked = self._label(plates, dict(update.assignments))
        for tid in update.ended:
            passes += self._end(tid, "track_ended", t)

        p = self.params
        for tid, state in list(self._tracks.items()):
            if not state.confirmed:
                continue
            vote = state.vote.result()
            if vote is None or not self._qualifies(vote):
                continue
            if (
                vote.is_confident(p.confident_reads, p.confident_share)
                and vote.last_t - vote.first_t >= p.confident_span_s
            ):
                passes += self._report(tid, vote, "confident", t)
                self._reported.add(tid)
            elif t - state.first_t >= p.max_delay_s:
                passes += self._report(tid, vote, "max_delay", t)
                self._reported.add(tid)
        return passes

    def _label(
        self, plates: tuple[PlateReading, ...], track_of: dict[int, int]
    ) -> tuple[TrackedPlate, ...]:
        """What the live view draws: each plate with its track and the track's voted text."""
        labelled = []
        for i, plate in enumerate(plates):
            tid = track_of.get(i)
            state = self._tracks.get(tid) if tid is not None else None
            vote = state.vote.result() if state is not None else None
            text = vote.text if vote is not None and vote.valid else plate.text
            confirmed = state is not None and state.confirmed
            labelled.append(TrackedPlate(plate.box, text, tid, confirmed))
        return tuple(labelled)

    def flush(self) -> list[PlatePass]:
        """End of stream: end every track and report those that qualify."""
        return self._end_all("flush")

    def _end_all(self, reason: PassReason) -> list[PlatePass]:
        passes: list[PlatePass] = []
        for tid in self._tracker.flush():
            passes += self._end(tid, reason, self._t)
        self._tracks.clear()
        self._reported.clear()
        return passes

    def _add_read(self, tid: int, frame: Frame, plate: PlateReading, t: float) -> None:
        state = self._tracks.get(tid)
        if state is None:
            state = _TrackState(
                vote=PlateVote(self.formats, self.min_text_score),
                first_t=t,
                first_seen=_without_image(frame),
                last_seen=_without_image(frame),
                best=plate,
                best_frame=frame,
                best_weight=-1.0,
            )
            self._tracks[tid] = state
        else:
            state.last_seen = _without_image(frame)
        if state.vote.add(plate.text, plate.text_score, plate.det_score, t):
            # The best read is one the vote kept: any kept read beats the ones it ignored.
            weight = plate.text_score * plate.det_score
            if weight > state.best_weight:
                state.best, state.best_frame, state.best_weight = plate, frame, weight

    def _qualifies(self, vote: VoteResult) -> bool:
        return vote.valid and vote.exact >= self.params.min_reads

    def _end(self, tid: int, reason: PassReason, t: float) -> list[PlatePass]:
        self._reported.discard(tid)
        state = self._tracks.get(tid)
        if state is None:
            return []
        vote = state.vote.result()
        if vote is None or not self._qualifies(vote):
            del self._tracks[tid]
            return []
        return self._report(tid, vote, reason, t)

    def _report(self, tid: int, vote: VoteResult, reason: PassReason, t: float) -> list[PlatePass]:
        state = self._tracks.pop(tid)
        window = self.params.dedup_window_s
        last = self._last_text_t.get(vote.text)
        if last is not None and t - last < window:
            self.suppressed += 1
            return []
        self._last_text_t = {s: v for s, v in self._last_text_t.items() if t - v < window}
        self._last_text_t[vote.text] = t
        return [
            PlatePass(
                camera=self.camera,
                track_id=tid,
                text=vote.text,
                confidence=vote.confidence,
                candidates=vote.candidates,
                reads=vote.reads,
                support=vote.support,
                exact=vote.exact,
                first_seen=state.first_seen,
                last_seen=state.last_seen,
                best=state.best,
                best_frame=state.best_frame,
                reason=reason,
                time_s=t,
            )
        ]
