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
plates) of at least ``min_confidence`` or a match in the known plates. The same text is
reported at most once per ``dedup_window_s`` on this camera.

A track that ends (or is flushed) is decided on the evidence it has, however little,
tentative tracks included: a valid vote short of those rules is *withheld*: a pass with
``withheld`` set (``low_confidence``, counted in ``unsure``; ``few_reads``, counted in
``few_reads``), not returned with the reported ones but taken with :meth:`take_withheld`;
the service logs it and keeps it in the history as a ``plate.withheld`` event. A *weak*
track (only low-score detections, streamer/tracking/tracker.py) is decided at its end
too, and reported if its reads qualify, but one that falls short is no withheld pass:
nothing but its reads said a plate was there (fate ``weak``). Every
track's end, whatever it was, is told to ``on_fate`` as a
:class:`~streamer.domain.plate_pass.TrackFate` (replay lists them).

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

Frames given to ``update`` must carry their picture: plate crops are compared on its
brightness (``Frame.luma``: a decoded frame's Y plane, no conversion on the event loop).

What it hands on (``PlatePass``, ``TrackedPlate``) is streamer/domain/plate_pass.py; its
rules (``PassParams``) are streamer/tracking/pass_params.py.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from streamer.domain.frames import Frame, FrameResult, PlateReading
from streamer.domain.known_plates import KnownPlates, Match
from streamer.domain.plate_formats import PlateFormats
from streamer.domain.plate_pass import (
    Fate,
    PassReason,
    PlatePass,
    TrackedPlate,
    TrackFate,
    WithheldReason,
)
from streamer.tracking import evidence
from streamer.tracking.pass_params import PassParams
from streamer.tracking.tracker import PlateTracker, TrackerParams
from streamer.tracking.vote import PlateVote, VoteResult

#: Image of a pass's ``first_seen`` / ``last_seen`` frames: only ``best_frame`` keeps pixels.
_NO_IMAGE = np.zeros((0, 0, 3), dtype=np.uint8)
_NO_IMAGE.flags.writeable = False

#: Pieces of evidence a track needs before ``max_delay`` may report it.
MAX_DELAY_MIN_EVIDENCE = 2


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
    weak: bool = True  # no high-score detection matched it (as of its latest read)
    anchor: evidence.Sample | None = None  # the last read counted as new evidence
    reported: _Reported | None = None


def _without_image(frame: Frame) -> Frame:
    return dataclasses.replace(frame, pixels=_NO_IMAGE)


class PassDetector:
    """Vehicle passes of one camera; feed it every processed frame in order.

    ``suppressed`` counts the passes not reported because the same text was
    reported within ``dedup_window_s``; ``unsure`` the passes withheld for a confidence
    short of ``min_confidence``; ``few_reads`` those withheld for fewer than ``min_reads``
    exact reads; ``corrections`` the updates reported. ``on_fate``, when set, is told how
    every track ended.
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
        """``tracker`` / ``passes``: None for the config's defaults (``PassParams.defaults``)."""
        self.camera = camera
        self.known = known or KnownPlates()
        self.params = passes or PassParams.defaults()
        self.formats = formats or PlateFormats()
        self.min_text_score = min_text_score
        self.suppressed = 0
        self.unsure = 0
        self.few_reads = 0
        self.corrections = 0
        self.on_fate: Callable[[TrackFate], None] | None = None
        self._withheld: list[PlatePass] = []  # until take_withheld()
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

    def reconfigure(
        self,
        tracker: TrackerParams,
        passes: PassParams,
        formats: PlateFormats,
        min_text_score: float,
        known: KnownPlates,
    ) -> None:
        """New rules (a config reload), in the constructor's order: every decision from now
        on follows them; an open track keeps its evidence, and its vote the formats and text
        score it started with."""
        self._tracker.params = tracker
        self.params = passes
        self.formats = formats
        self.min_text_score = min_text_score
        self.known = known

    @property
    def active_tracks(self) -> int:
        """Confirmed tracks alive now (for the ``lpr_active_tracks`` gauge)."""
        return sum(1 for tid in self._tracker.track_ids if self._tracker.is_confirmed(tid))

    @property
    def live_tracks(self) -> int:
        """Tracks alive now, tentative ones included but weak ones not (the motion gate's
        "live track"): a vehicle seen once just before it stopped is still re-read, a
        faint detection of the background keeps nothing sent."""
        return sum(1 for tid in self._tracker.track_ids if not self._tracker.is_weak(tid))

    def track_boxes(self) -> np.ndarray:
        """Every track's box as the tracker holds it (x1, y1, x2, y2 rows, float32 [K, 4]):
        where this camera's plates were at the latest answer (a frame's ``focus``)."""
        boxes = [self._tracker.predicted_box(tid) for tid in self._tracker.track_ids]
        return np.array(boxes, np.float32).reshape(-1, 4)

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
        self._last = _without_image(frame)  # its times only: not a picture per camera

        plates = result.plates
        boxes = np.array([p.box for p in plates], dtype=np.float64).reshape(-1, 4)
        scores = np.array([p.det_score for p in plates], dtype=np.float64)
        update = self._tracker.update(t, boxes, scores)

        for tid in update.dropped:  # tentative tracks lost: decided on what they have
            passes += self._end(tid, "track_ended", t)
        weak = set(update.weak)
        for det, tid in update.assignments:
            if tid not in self._done:
                self._add_read(tid, frame, plates[det], t)
                if tid in self._tracks:
                    self._tracks[tid].weak = tid in weak
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

    def erase(self, plate: str | None, event_id: str | None) -> tuple[int, set[str]]:
        """An erasure: every open track whose readings hold ``plate`` (its text, a candidate,
        the text reported) or that reported the pass ``event_id`` is decided for good without
        a report (its reads are ignored until it ends), and the plate is forgotten by the
        deduplication; (how many tracks, the ids of the passes among them reported)."""
        stopped, ids = 0, set()
        for tid, state in list(self._tracks.items()):
            vote = state.vote.result()
            texts = {vote.text, *(text for text, _ in vote.candidates)} if vote else set()
            reported = state.reported
            if reported is not None:
                texts.add(reported.text)
            if (plate is not None and plate in texts) or (
                reported is not None and reported.event_id == event_id
            ):
                stopped += 1
                if reported is not None:
                    ids.add(reported.event_id)
                self._fate(tid, state, "erased", vote)
                self._finish(tid, "")
        if plate is not None:
            self._last_text_t.pop(plate, None)
            self._done = {tid: ("" if text == plate else text) for tid, text in self._done.items()}
        return stopped, ids

    def flush(self) -> list[PlatePass]:
        """End of stream: end every track and report (or correct) those that qualify."""
        return self._end_all("flush")

    def _end_all(self, reason: PassReason) -> list[PlatePass]:
        """End every track, tentative ones included, in the order they started."""
        self._tracker.flush()
        passes: list[PlatePass] = []
        for tid in sorted(self._tracks):
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
        # The Y plane of a decoded frame: no conversion of the picture here, on the loop.
        image, limited = frame.luma()
        new = evidence.is_new(
            state.anchor, image, plate.box, p.evidence_min_change, p.evidence_min_shift, limited
        )
        if state.vote.add(
            plate.text, plate.text_score, plate.det_score, t, new=new, char_probs=plate.char_probs
        ):
            if new:
                state.anchor = evidence.Sample.of(image, plate.box, limited)
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
        elif vote is not None and state.reported is None and vote.valid:
            if state.weak:
                self._fate(tid, state, "weak", vote)
                self._tracks.pop(tid, None)
                return []
            self._withhold(tid, vote, reason, t)
        if tid in self._tracks:  # (not finished by a report: a duplicate, updates off)
            self._fate(tid, state, "reported" if state.reported else "no_valid_text", vote)
        self._tracks.pop(tid, None)
        return passes

    def take_withheld(self) -> list[PlatePass]:
        """The passes withheld since the last call, in the order they were decided."""
        withheld, self._withheld = self._withheld, []
        return withheld

    def _withhold(self, tid: int, vote: VoteResult, reason: PassReason, t: float) -> None:
        """A valid vote that ended short of the rules: withheld, unless a duplicate."""
        state = self._tracks[tid]
        last = self._last_text_t.get(vote.text)
        if last is not None and t - last < self.params.dedup_window_s:
            self.suppressed += 1
            self._fate(tid, state, "duplicate", vote, vote.text)
            self._finish(tid, vote.text)
            return
        why: WithheldReason
        if self._read_enough(vote):
            why = "low_confidence"
            self.unsure += 1
        else:
            why = "few_reads"
            self.few_reads += 1
        reported = _Reported(str(uuid.uuid4()), vote.text, 1)
        withheld = self._pass(tid, state, vote, reason, t, reported, None, None, withheld=why)
        self._withheld.append(withheld)
        self._fate(tid, state, "withheld", vote, why)
        self._finish(tid, vote.text)

    def _fate(
        self,
        tid: int,
        state: _TrackState,
        fate: Fate,
        vote: VoteResult | None,
        detail: str = "",
    ) -> None:
        if self.on_fate is None:
            return
        if state.reported is not None:
            text = state.reported.text
        else:
            text = vote.text if vote is not None else state.best.text
        self.on_fate(
            TrackFate(
                camera=self.camera,
                track_id=tid,
                fate=fate,
                text=text,
                confidence=vote.confidence if vote is not None else None,
                reads=vote.reads if vote is not None else 0,
                exact=vote.exact if vote is not None else 0,
                first_t=state.first_t,
                last_t=vote.last_t if vote is not None else state.first_t,
                detail=detail,
            )
        )

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
            self._fate(tid, state, "duplicate", vote, text)
            self._finish(tid, text)
            return []
        self._remember(text, t)
        reported = _Reported(str(uuid.uuid4()), text, 1)
        plate_pass = self._pass(tid, state, vote, reason, t, reported, None, match)
        state.reported = reported
        if not self.params.updates:
            self._fate(tid, state, "reported", vote)
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
        withheld: WithheldReason | None = None,
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
            withheld=withheld,
        )
