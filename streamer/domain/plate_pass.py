"""What the pass stage hands on: a decided vehicle pass (``PlatePass``, to delivery) and the
plates of the latest frame as the live view draws them (``TrackedPlate``, to web/).

Data only: :class:`~streamer.tracking.passes.PassDetector` makes them
(streamer/tracking/passes.py says when and why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from streamer.domain.frames import Frame, PlateReading
from streamer.domain.known_plates import Match

#: Why a pass was reported (see streamer/tracking/passes.py).
PassReason = Literal["confident", "track_ended", "max_delay", "flush"]
#: Why a decided pass was withheld: its confidence was under ``events.min_confidence``, or its
#: valid text was read exactly fewer than ``events.min_reads`` times.
WithheldReason = Literal["low_confidence", "few_reads"]


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
    #: The known plate ``text`` matched (streamer/domain/known_plates.py), if any.
    match: Match | None = None
    #: The vote's own text when ``text`` is a known plate snapped to (else None).
    voted_text: str | None = None
    #: Stream seconds from the track's first read to this decision.
    decided_after_s: float = 0.0
    #: Per character of the vote's text, its fused probability.
    char_confidence: tuple[float, ...] = ()
    #: Set when the pass is not reported but withheld (a ``plate.withheld`` event): why.
    withheld: WithheldReason | None = None


#: What became of a track (streamer/tracking/passes.py): ``reported`` (its pass, corrections
#: included), ``withheld`` (a ``plate.withheld`` event), ``duplicate`` (its text was reported
#: within ``events.dedup_window_s``), ``no_valid_text`` (no read made a valid plate),
#: ``weak`` (a valid text short of the rules on a track of low-score detections only: not
#: a pass, see streamer/tracking/tracker.py), ``erased`` (stopped by an erasure).
Fate = Literal["reported", "withheld", "duplicate", "no_valid_text", "weak", "erased"]


@dataclass(frozen=True, slots=True)
class TrackFate:
    """A track's end, whatever it was (what ``python -m streamer replay`` lists).

    ``text``: what was reported, else the vote's text, else the most frequent raw read
    ("" when none); ``confidence``: the vote's (None without a vote); ``detail``: the
    withheld reason, or the text a duplicate repeated.
    """

    camera: str
    track_id: int
    fate: Fate
    text: str
    confidence: float | None
    reads: int
    exact: int
    first_t: float
    last_t: float
    detail: str = ""
