"""From per-frame plate reads of one camera to one decision per vehicle pass.

``PassDetector`` feeds each ``FrameResult`` into a ``PlateTracker``, gives
every track a ``PlateVote`` over its evidence (streamer/tracking/evidence.py: a read of
a still image again is not new evidence) and reports a track once, as a
``PlatePass``, at the first of:

- ``confident``: the vote is valid, backed by ``confident_reads`` pieces of
  evidence, at least ``confident_share`` sure, and its evidence spans
  ``confident_span_s``;
- ``max_delay`` (``decide: fast`` only): ``max_delay_s`` have passed since the
  track was first seen, it has at least two pieces of evidence (a still image
  alone, a car waiting at a barrier, is one: it is waited on until the car
  moves or leaves) and no position of the vote is a tie;
- ``track_ended``: the track was unseen for the tracker's buffer;
- ``flush``: the stream ended (``flush()``) or its time went backwards;

and only if the vote is then valid, with at least ``min_reads`` reads equal to
it and a confidence (streamer/tracking/fusion.py: its text's probability among the valid
plates) of at least ``min_confidence`` or a match in the known plates; a track
that ends short of it is not reported (``unsure`` counts them). The same text is
reported at most once per ``dedup_window_s`` on this camera.

With ``updates`` on, a reported track goes on collecting evidence; when its
vote changes to another text that is confident, or that it ends on, the pass
is reported again with the same ``event_id``, ``version`` + 1 and the text it
replaces (``previous_text``): a correction. ``decide: sure`` reports only on
``confident`` evidence or when the track ends, so it rarely needs one.

Why ``confident_span_s``: consecutive frames are not independent evidence.
A moving plate misread in one frame is usually misread the same way in the
next ones (same pose, light and blur). Asking that agreeing evidence also span
stream time makes an early decision mean the same at any frame rate.

Stream time is ``Frame.pts_s``, made monotonic per camera: when it jumps
backwards (reconnect, file loop) every track is flushed and time continues
from the last one, plus the decode-time (``Frame.monotonic``) gap between the
two frames, so deduplication keeps working across the jump.

Frames given to ``update`` must carry their image (``Frame.image``): the
inference stage converted it, in a worker thread, before sending it.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from dataclasses import dataclass
from typing import Literal

import numpy as np

from streamer.domain.frames import Frame, FrameResult, PlateReading
from streamer.tracking import evidence
from streamer.tracking.known_plates import KnownPlates, Match
from streamer.tracking.plate_formats import PlateFormats
from streamer.tracking.tracker import PlateTracker, TrackerParams
from streamer.tracking.vote import PlateVote, VoteResult

#: Image of a pass's ``first_seen`` / ``last_seen`` frames: only ``best_frame`` keeps pixels.
_NO_IMAGE = np.zeros((0, 0, 3), dtype=np.uint8)
_NO_IMAGE.flags.writeable = False

#: Pieces of evidence a track needs before ``max_delay`` may report it.
MAX_DELAY_MIN_EVIDENCE = 2
#: The confidence a pass needs to be reported at all (``events.min_confidence``), chosen on
#: the labelled set (docs/ACCURACY.md, its calibration table).
MIN_CONFIDENCE = 0.5

#: Why a pass was reported (see the module docstring).
PassReason = Literal["confident", "track_ended", "max_delay", "flush"]
#: ``fast``: report at max_delay_s, correct later; ``sure``: wait for confidence or the end.
Decide = Literal["fast", "sure"]


@dataclass(frozen=True, slots=True)
class TrackedPlate:
    """A plate of the latest frame as the live view shows it.

    ``text``: the track's decision (its reported text) or, before one, its vote when that is a
    valid plate, else this frame's read; ``read``: this frame's read; ``decided``: ``text`` is
    what was reported.
    """

    box: tuple[float, float, float, float]
    text: str
    track_id: int | None  # None: not (yet) associated with a track
    confirmed: bool
    read: str = ""
    decided: bool = False


@dataclass(frozen=True, slots=True)
class PassParams:
    """When a tracked plate is reported.

    ``min_reads``: reads exactly equal to the voted text needed to report at
    all; the guard against a consensus no frame showed. ``min_confidence``: the
    vote's confidence needed to report at all. ``confident_reads`` /
    ``confident_share`` / ``confident_span_s``: an early report needs this
    many pieces of evidence within one edit of the text, this confidence, and
    evidence spanning this many stream seconds; higher
    means later but surer. ``max_delay_s``: after this long since a track was
    first seen it is reported as soon as it qualifies (``decide: fast``).
    ``dedup_window_s``: the same text is not reported twice on a camera within
    this many seconds. ``updates``: report corrections. ``evidence_min_change`` /
    ``evidence_min_shift``: when a read is new evidence (streamer/tracking/evidence.py).
    """

    min_reads: int = 2
    min_confidence: float = MIN_CONFIDENCE
    confident_reads: int = 10
    confident_share: float = 0.8
    confident_span_s: float = 2.0
    max_delay_s: float = 6.0
    dedup_window_s: float = 300.0
    decide: Decide = "fast"
    updates: bool = True
    evidence_min_change: float = evidence.MIN_CHANGE
    evidence_min_shift: float = evidence.MIN_SHIFT

    def __post_init__(self) -> None:
        if self.min_reads < 1:
            raise ValueError(f"min_reads must be >= 1, got {self.min_reads}")
        if self.confident_reads < 1:
            raise ValueError(f"confident_reads must be >= 1, got {self.confident_reads}")
        for name in ("min_confidence", "confident_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        for name in ("confident_span_s", "max_delay_s", "dedup_window_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value}")
        if self.decide not in ("fast", "sure"):
            raise ValueError(f"decide must be 'fast' or 'sure', got {self.decide!r}")
        evidence.check(self.evidence_min_change, self.evidence_min_shift)


@dataclass(frozen=True, slots=True)
class PlatePass:
    """One vehicle pass: the decision for one track, or a correction of it.

    ``event_id``: the pass's id, the same in its corrections; ``version``: 1 for the
    first report, + 1 per correction; ``previous_text``: the text a correction replaces.
    ``text`` is the vote's, or the known plate it matched when that list snaps.
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
    evidence: int
    support: float
    exact: int
    first_seen: Frame
    last_seen: Frame
    best: PlateReading
    best_frame: Frame
    reason: PassReason
    time_s: float
    event_id: str
    version: int = 1
    previous_text: str | None = None
    #: The known plate ``text`` matched (streamer/tracking/known_plates.py), if any.
    match: Match | None = None
    #: The vote's own text when ``text`` is a known plate snapped to (else None).
    voted_text: str | None = None
    #: Stream seconds from the track's first read to this decision.
    decided_after_s: float = 0.0
    #: Per character of the vote's text, its fused probability.
    char_confidence: tuple[float, ...] = ()


@dataclass(slots=True)
class _Reported:
    event_id: str
    text: str
    version: int


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
    anchor: evidence.Sample | None = None  # the last read counted as new evidence
    reported: _Reported | None = None


def _without_image(frame: Frame) -> Frame:
    return dataclasses.replace(frame, pixels=_NO_IMAGE)


class PassDetector:
    """Vehicle passes of one camera; feed it every processed frame in order.

    ``suppressed`` counts the passes not reported because the same text was
    reported within ``dedup_window_s``; ``unsure`` the tracks that ended valid but
    short of ``min_confidence``; ``corrections`` the updates reported.
    """

    def __init__(
        self,
        camera: str,
        tracker: TrackerParams | None = None,
        passes: PassParams | None = None,
        formats: PlateFormats | None = None,
        min_text_score: float = 0.5,
        known: KnownPlates | None = None,
    ) -> None:
        self.camera = camera
        self.known = known or KnownPlates()
        self.params = passes or PassParams()
        self.formats = formats or PlateFormats()
        self.min_text_score = min_text_score
        self.suppressed = 0
        self.unsure = 0
        self.corrections = 0
        self.last_tracked: tuple[TrackedPlate, ...] = ()
        self._tracker = PlateTracker(tracker)
        self._tracks: dict[int, _TrackState] = {}
        # Live tracks decided for good (their reads are ignored): tid -> the text reported
        # (a duplicate suppressed: the text it duplicated).
        self._done: dict[int, str] = {}
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
        """Process one frame's reads; returns the passes decided (or corrected) at this frame."""
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
            self._done.pop(tid, None)
        for det, tid in update.assignments:
            if tid not in self._done:
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
            confident = (
                vote.is_confident(p.confident_reads, p.confident_share)
                and vote.last_t - vote.first_t >= p.confident_span_s
            )
            if state.reported is not None:
                if confident and self._decided(vote)[0] != state.reported.text:
                    passes += self._correct(tid, vote, "confident", t)
            elif confident:
                passes += self._report(tid, vote, "confident", t)
            elif (
                p.decide == "fast"
                and t - state.first_t >= p.max_delay_s
                and vote.evidence >= MAX_DELAY_MIN_EVIDENCE
                and not vote.tied  # a tie is no decision: wait for more evidence
            ):
                passes += self._report(tid, vote, "max_delay", t)
        return passes

    def _label(
        self, plates: tuple[PlateReading, ...], track_of: dict[int, int]
    ) -> tuple[TrackedPlate, ...]:
        """What the live view draws: each plate with its track and the track's text."""
        labelled = []
        for i, plate in enumerate(plates):
            tid = track_of.get(i)
            state = self._tracks.get(tid) if tid is not None else None
            vote = state.vote.result() if state is not None else None
            done = self._done.get(tid) if tid is not None else None
            decided = done is not None or (state is not None and state.reported is not None)
            if done is not None:
                text = done
            elif state is not None and state.reported is not None:
                text = state.reported.text
            elif vote is not None and vote.valid:
                text = vote.text
            else:
                text = plate.text
            confirmed = done is not None or (state is not None and state.confirmed)
            labelled.append(TrackedPlate(plate.box, text, tid, confirmed, plate.text, decided))
        return tuple(labelled)

    def flush(self) -> list[PlatePass]:
        """End of stream: end every track and report (or correct) those that qualify."""
        return self._end_all("flush")

    def _end_all(self, reason: PassReason) -> list[PlatePass]:
        passes: list[PlatePass] = []
        for tid in self._tracker.flush():
            passes += self._end(tid, reason, self._t)
        self._tracks.clear()
        self._done.clear()
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
        p = self.params
        image = frame.image
        new = evidence.is_new(
            state.anchor, image, plate.box, p.evidence_min_change, p.evidence_min_shift
        )
        if state.vote.add(
            plate.text, plate.text_score, plate.det_score, t, new=new, char_probs=plate.char_probs
        ):
            if new:
                state.anchor = evidence.Sample.of(image, plate.box)
            # The best read is one the vote kept: any kept read beats the ones it ignored.
            weight = plate.text_score * plate.det_score
            if weight > state.best_weight:
                state.best, state.best_frame, state.best_weight = plate, frame, weight

    def _read_enough(self, vote: VoteResult) -> bool:
        """A valid text read exactly ``min_reads`` times: a pass, if sure enough."""
        return vote.valid and vote.exact >= self.params.min_reads

    def _qualifies(self, vote: VoteResult) -> bool:
        if not self._read_enough(vote):
            return False
        # A known plate within its list's distance is reported however unsure the read: the
        # list is the evidence its owner gave (the match is only looked up when needed).
        return vote.confidence >= self.params.min_confidence or (
            bool(self.known) and self.known.match(vote.text) is not None
        )

    def _end(self, tid: int, reason: PassReason, t: float) -> list[PlatePass]:
        self._done.pop(tid, None)
        state = self._tracks.get(tid)
        if state is None:
            return []
        vote = state.vote.result()
        passes: list[PlatePass] = []
        if vote is not None and self._qualifies(vote):
            if state.reported is None:
                passes = self._report(tid, vote, reason, t)
            elif self._decided(vote)[0] != state.reported.text:
                passes = self._correct(tid, vote, reason, t)
        elif vote is not None and state.reported is None and self._read_enough(vote):
            self.unsure += 1  # read enough, but not sure enough
        self._tracks.pop(tid, None)
        return passes

    def _finish(self, tid: int, text: str) -> None:
        """The track is decided for good (as ``text``): forget it, ignore its reads until it
        ends."""
        self._tracks.pop(tid, None)
        self._done[tid] = text

    def _decided(self, vote: VoteResult) -> tuple[str, Match | None]:
        """The text to report for ``vote``, and the known plate it matched."""
        match = self.known.match(vote.text) if self.known else None
        return (match.plate if match is not None and match.snap else vote.text), match

    def _report(self, tid: int, vote: VoteResult, reason: PassReason, t: float) -> list[PlatePass]:
        state = self._tracks[tid]
        text, match = self._decided(vote)
        window = self.params.dedup_window_s
        last = self._last_text_t.get(text)
        if last is not None and t - last < window:
            self.suppressed += 1
            self._finish(tid, text)
            return []
        self._remember(text, t)
        reported = _Reported(str(uuid.uuid4()), text, 1)
        plate_pass = self._pass(tid, state, vote, reason, t, reported, None, match)
        if self.params.updates:
            state.reported = reported
        else:
            self._finish(tid, text)
        return [plate_pass]

    def _correct(self, tid: int, vote: VoteResult, reason: PassReason, t: float) -> list[PlatePass]:
        state = self._tracks[tid]
        reported = state.reported
        assert reported is not None
        text, match = self._decided(vote)
        previous = reported.text
        reported.text, reported.version = text, reported.version + 1
        self._remember(text, t)
        self.corrections += 1
        return [self._pass(tid, state, vote, reason, t, reported, previous, match)]

    def _remember(self, text: str, t: float) -> None:
        window = self.params.dedup_window_s
        self._last_text_t = {s: v for s, v in self._last_text_t.items() if t - v < window}
        self._last_text_t[text] = t

    def _pass(
        self,
        tid: int,
        state: _TrackState,
        vote: VoteResult,
        reason: PassReason,
        t: float,
        reported: _Reported,
        previous_text: str | None,
        match: Match | None,
    ) -> PlatePass:
        return PlatePass(
            camera=self.camera,
            track_id=tid,
            text=reported.text,
            confidence=vote.confidence,
            candidates=vote.candidates,
            reads=vote.reads,
            evidence=vote.evidence,
            support=vote.support,
            exact=vote.exact,
            first_seen=state.first_seen,
            last_seen=state.last_seen,
            best=state.best,
            best_frame=state.best_frame,
            reason=reason,
            time_s=t,
            event_id=reported.event_id,
            version=reported.version,
            previous_text=previous_text,
            match=match,
            voted_text=vote.text if reported.text != vote.text else None,
            decided_after_s=t - state.first_t,
            char_confidence=vote.chars,
        )
