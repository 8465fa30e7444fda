"""ByteTrack-style tracking of plate boxes within one camera.

Detections of one frame are associated with the live tracks in two stages, as
in ByteTrack (Zhang et al., 2022; ``supervision.ByteTrack``): high-score
detections first, against every live track; then low-score detections, only
against the tracks that were matched at the previous update and are still
unmatched. A low-score detection extends a track, so a plate that fades (blur,
glare, distance) keeps its track. Unlike ByteTrack, a low-score detection left
unmatched starts a *weak* track rather than none: a plate coming from far away
is scored low for its first frames, and those are often the frames it is read
best in (a car driving towards the camera is read at 0.95 while the detector
still says 0.35). A weak track is tentative until a high-score detection
matches it, however often low ones do (``TrackerUpdate.weak``), so background
noise scored low never confirms a track; what the caller makes of a weak
track's reads is its own rule (streamer/tracking/passes.py reports one only on
reads that qualify alone, and does not count it as a vehicle otherwise).
Matching is by IoU between each
track's constant-velocity Kalman prediction and the detections, solved with
the Hungarian algorithm (``scipy.optimize.linear_sum_assignment``).

Lifetimes are in stream seconds, not frames, so they mean the same at 15 fps,
at 5 fps and with dropped frames: a track unseen for longer than
``lost_track_buffer_s`` ends. A new track is tentative until it has been
matched ``min_hits`` times; its id is reported from its first detection, with
a flag, so a caller can keep its first reads and decide what to do with them
once the track is confirmed (``TrackerUpdate.confirmed``) or dropped
(``TrackerUpdate.dropped``).

Pure and synchronous: time is passed in by the caller and ids are counted per
tracker instance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment

from streamer.config import TrackerConfig

#: Measurement noise of a box centre and height, as a fraction of its height (ByteTrack's 1/20).
MEASUREMENT_STD = 1.0 / 20.0
#: Measurement noise of the aspect ratio (width / height), absolute.
MEASUREMENT_STD_ASPECT = 0.1
#: Process noise per sqrt(second): position (x height), aspect, velocity (x height per second),
#: aspect velocity. ByteTrack's per-frame values at 30 fps, converted to stream time.
PROCESS_STD_POSITION = 0.2
PROCESS_STD_ASPECT = 0.05
PROCESS_STD_VELOCITY = 1.0
PROCESS_STD_ASPECT_VELOCITY = 0.01
#: Uncertainty of a new track's velocity (x height per second): a plate can start moving any way.
INITIAL_STD_VELOCITY = 2.0
#: Smallest height and aspect a predicted box may have, so extrapolation cannot invert a box.
MIN_SIZE = 1e-3


@dataclass(frozen=True, slots=True)
class TrackerParams:
    """How detections become tracks.

    ``iou_threshold``: the least IoU between a track's predicted box and a
    detection for them to match. Plates are small and move little between
    frames, so a low threshold tolerates jitter and dropped frames; too low
    and two adjacent plates can swap.
    ``high_score`` / ``low_score``: detections at or above ``high_score`` are
    matched first, start tracks and confirm them; those in ``[low_score,
    high_score)`` extend tracks and start weak ones (tentative until a
    high-score detection matches them); those below ``low_score`` are ignored.
    ``lost_track_buffer_s``: how long (stream seconds) a track survives
    unseen. Longer bridges occlusions, but a track ends (and its pass is
    decided) later.
    ``min_hits``: matches before a track is confirmed; 1 confirms at once.

    Their defaults and bounds are the ``tracker:`` config section's
    (streamer/config/decisions.py): build one with :meth:`from_config`.
    """

    iou_threshold: float
    high_score: float
    low_score: float
    lost_track_buffer_s: float
    min_hits: int

    @classmethod
    def from_config(cls, config: TrackerConfig) -> TrackerParams:
        """The parameters of a ``tracker:`` section (``TrackerConfig()``: the defaults)."""
        return cls(
            iou_threshold=config.iou_threshold,
            high_score=config.high_score,
            low_score=config.low_score,
            lost_track_buffer_s=config.lost_track_buffer_s,
            min_hits=config.min_hits,
        )

    @classmethod
    def defaults(cls) -> TrackerParams:
        """The ``tracker:`` section's defaults, for a tracker built without a config."""
        return cls.from_config(TrackerConfig())


@dataclass(frozen=True, slots=True)
class TrackerUpdate:
    """What one ``PlateTracker.update`` did.

    ``assignments``: ``(detection index, track id)`` for every detection that
    was matched to a track or started one, tentative tracks included.
    ``tentative``: ids among ``assignments`` whose track is still tentative.
    ``confirmed``: ids confirmed at this update (their earlier detections were
    reported in earlier updates, as tentative).
    ``ended``: confirmed tracks removed at this update (unseen for longer than
    ``lost_track_buffer_s``, or all of them when time went backwards).
    ``dropped``: tentative tracks removed at this update without ever being
    confirmed.
    ``weak``: ids among ``assignments`` whose track no high-score detection has
    matched yet (all of them tentative).
    """

    assignments: list[tuple[int, int]] = field(default_factory=list)
    tentative: list[int] = field(default_factory=list)
    confirmed: list[int] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    weak: list[int] = field(default_factory=list)

    def confirmed_assignments(self) -> list[tuple[int, int]]:
        """The assignments to confirmed tracks only."""
        tentative = set(self.tentative)
        return [(det, tid) for det, tid in self.assignments if tid not in tentative]


# The Kalman filter is written here with numpy rather than taken from a
# package: it is forty lines, and no maintained dependency offers just a
# constant-velocity (cx, cy, aspect, h) filter with time-based steps (filterpy
# is unmaintained; supervision and ultralytics would bring a detector stack).
class _KalmanFilter:
    """Constant-velocity Kalman filter on ``(cx, cy, aspect, h)`` as in SORT and
    ByteTrack, with steps of any length in seconds (velocities are per second)."""

    _H = np.hstack([np.eye(4), np.zeros((4, 4))])

    @staticmethod
    def initiate(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h = z[3]
        mean = np.concatenate([z, np.zeros(4)])
        std = np.array(
            [
                2 * MEASUREMENT_STD * h,
                2 * MEASUREMENT_STD * h,
                2 * MEASUREMENT_STD_ASPECT,
                2 * MEASUREMENT_STD * h,
                INITIAL_STD_VELOCITY * h,
                INITIAL_STD_VELOCITY * h,
                10 * PROCESS_STD_ASPECT_VELOCITY,
                INITIAL_STD_VELOCITY * h,
            ]
        )
        return mean, np.diag(std**2)

    @staticmethod
    def predict(mean: np.ndarray, cov: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        if dt <= 0.0:
            return mean, cov
        f = np.eye(8)
        f[:4, 4:] = dt * np.eye(4)
        h = max(mean[3], MIN_SIZE)
        rate = np.array(
            [
                PROCESS_STD_POSITION * h,
                PROCESS_STD_POSITION * h,
                PROCESS_STD_ASPECT,
                PROCESS_STD_POSITION * h,
                PROCESS_STD_VELOCITY * h,
                PROCESS_STD_VELOCITY * h,
                PROCESS_STD_ASPECT_VELOCITY,
                PROCESS_STD_VELOCITY * h,
            ]
        )
        q = np.diag(rate**2 * dt)
        return f @ mean, f @ cov @ f.T + q

    @classmethod
    def update(
        cls, mean: np.ndarray, cov: np.ndarray, z: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        h = max(mean[3], MIN_SIZE)
        std = np.array([MEASUREMENT_STD * h] * 2 + [MEASUREMENT_STD_ASPECT, MEASUREMENT_STD * h])
        r = np.diag(std**2)
        s = cls._H @ cov @ cls._H.T + r
        gain = np.linalg.solve(s, cls._H @ cov).T  # cov H^T S^-1 (S and cov symmetric)
        mean = mean + gain @ (z - cls._H @ mean)
        cov = cov - gain @ s @ gain.T
        return mean, (cov + cov.T) / 2


def _box_to_z(box: np.ndarray) -> np.ndarray:
    w = max(box[2] - box[0], MIN_SIZE)
    h = max(box[3] - box[1], MIN_SIZE)
    return np.array([(box[0] + box[2]) / 2, (box[1] + box[3]) / 2, w / h, h])


def _z_to_box(z: np.ndarray) -> np.ndarray:
    h = max(z[3], MIN_SIZE)
    w = max(z[2], MIN_SIZE) * h
    return np.array([z[0] - w / 2, z[1] - h / 2, z[0] + w / 2, z[1] + h / 2])


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` [N, 4] with every box of ``b`` [M, 4] (x1, y1, x2, y2)."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def _match(ious: np.ndarray, threshold: float) -> list[tuple[int, int]]:
    """Row/column pairs of the maximum-IoU assignment with IoU >= threshold."""
    if ious.size == 0:
        return []
    cost = np.where(ious >= threshold, 1.0 - ious, 1e6)
    rows, cols = linear_sum_assignment(cost)
    return [(int(r), int(c)) for r, c in zip(rows, cols, strict=True) if ious[r, c] >= threshold]


@dataclass(slots=True)
class _Track:
    track_id: int
    mean: np.ndarray
    cov: np.ndarray
    t: float  # time of mean / cov
    last_seen: float
    hits: int = 1
    confirmed: bool = False
    tracked: bool = True  # matched at the latest update
    strong: bool = True  # a high-score detection started or matched it

    def predict(self, t: float) -> None:
        self.mean, self.cov = _KalmanFilter.predict(self.mean, self.cov, t - self.t)
        self.t = t

    def box(self) -> np.ndarray:
        return _z_to_box(self.mean[:4])


class PlateTracker:
    """Multi-object tracker of the plate boxes of one camera.

    Call ``update`` once for every processed frame, in order, also for frames
    with no detections (that is how tracks age); ``flush`` at the end of the
    stream. If time goes backwards (camera reconnect, file loop) every track
    is ended first, and tracking starts again from the new time.
    """

    def __init__(self, params: TrackerParams | None = None) -> None:
        """``params``: None for the ``tracker:`` section's defaults."""
        self.params = params or TrackerParams.defaults()
        self._tracks: dict[int, _Track] = {}
        self._next_id = 1
        self._t: float | None = None

    @property
    def track_ids(self) -> list[int]:
        """Ids of the live tracks, tentative ones included."""
        return list(self._tracks)

    def is_confirmed(self, track_id: int) -> bool:
        return self._tracks[track_id].confirmed

    def is_weak(self, track_id: int) -> bool:
        """No high-score detection has matched the track yet (see the module docstring)."""
        return not self._tracks[track_id].strong

    def predicted_box(self, track_id: int) -> np.ndarray:
        """The track's box (x1, y1, x2, y2) as the filter holds it at the latest update."""
        return self._tracks[track_id].box()

    def flush(self) -> list[int]:
        """End every live track (end of stream); returns the confirmed ones.

        Tentative tracks are dropped, as when they are lost.
        """
        ended = [tid for tid, tr in self._tracks.items() if tr.confirmed]
        self._tracks.clear()
        return ended

    def update(self, t: float, boxes: np.ndarray, scores: np.ndarray) -> TrackerUpdate:
        """Associate the detections of the frame at stream time ``t`` (seconds).

        ``boxes`` [N, 4] are x1, y1, x2, y2 in pixels, ``scores`` [N] the
        detector's confidences.
        """
        boxes, scores = _validate(t, boxes, scores)
        p = self.params
        ended: list[int] = []
        dropped: list[int] = []
        if self._t is not None and t < self._t:
            for tid, tr in self._tracks.items():
                (ended if tr.confirmed else dropped).append(tid)
            self._tracks.clear()
        self._t = t

        tracks = list(self._tracks.values())
        for tr in tracks:
            tr.predict(t)
        predicted = np.array([tr.box() for tr in tracks]).reshape(-1, 4)

        high = np.flatnonzero(scores >= p.high_score)
        low = np.flatnonzero((scores >= p.low_score) & (scores < p.high_score))
        matches: list[tuple[int, _Track]] = []

        first = _match(iou_matrix(predicted, boxes[high]), p.iou_threshold)
        matched_tracks = {r for r, _ in first}
        matches += [(int(high[c]), tracks[r]) for r, c in first]
        for _, tr in matches:
            tr.strong = True
        unmatched_high = sorted(set(range(len(high))) - {c for _, c in first})

        pool = [i for i, tr in enumerate(tracks) if i not in matched_tracks and tr.tracked]
        second = _match(iou_matrix(predicted[pool], boxes[low]), p.iou_threshold)
        matches += [(int(low[c]), tracks[pool[r]]) for r, c in second]
        unmatched_low = sorted(set(range(len(low))) - {c for _, c in second})

        confirmed: list[int] = []
        matched_ids: set[int] = set()
        for det, tr in matches:
            tr.mean, tr.cov = _KalmanFilter.update(tr.mean, tr.cov, _box_to_z(boxes[det]))
            tr.last_seen = t
            tr.hits += 1
            matched_ids.add(tr.track_id)
            if not tr.confirmed and tr.strong and tr.hits >= p.min_hits:
                tr.confirmed = True
                confirmed.append(tr.track_id)
        for tr in tracks:
            tr.tracked = tr.track_id in matched_ids
            # Expired only when unmatched now: after a gap with no frames at all (a stalled
            # camera, dropped frames) a track still there is found again, as in ByteTrack.
            if not tr.tracked and t - tr.last_seen > p.lost_track_buffer_s:
                (ended if tr.confirmed else dropped).append(tr.track_id)
                del self._tracks[tr.track_id]

        assignments = [(det, tr.track_id) for det, tr in matches]
        starts = [(int(high[c]), True) for c in unmatched_high]
        starts += [(int(low[c]), False) for c in unmatched_low]
        for det, strong in starts:
            mean, cov = _KalmanFilter.initiate(_box_to_z(boxes[det]))
            tr = _Track(self._next_id, mean, cov, t=t, last_seen=t, strong=strong)
            self._next_id += 1
            if strong and p.min_hits <= 1:
                tr.confirmed = True
                confirmed.append(tr.track_id)
            self._tracks[tr.track_id] = tr
            assignments.append((det, tr.track_id))

        assignments.sort()
        tentative = [tid for _, tid in assignments if not self._tracks[tid].confirmed]
        weak = [tid for _, tid in assignments if not self._tracks[tid].strong]
        return TrackerUpdate(assignments, tentative, confirmed, ended, dropped, weak)


def _validate(t: float, boxes: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not math.isfinite(t):
        raise ValueError(f"t must be a finite stream time in seconds, got {t}")
    boxes = np.asarray(boxes, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    if boxes.size == 0 and scores.size == 0:
        return boxes.reshape(0, 4), scores.reshape(0)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"boxes must have shape [N, 4] (x1, y1, x2, y2), got {boxes.shape}")
    if scores.shape != (len(boxes),):
        raise ValueError(
            f"scores must have shape [N] = ({len(boxes)},) to match boxes {boxes.shape}, "
            f"got {scores.shape}"
        )
    if not (np.isfinite(boxes).all() and np.isfinite(scores).all()):
        raise ValueError("boxes and scores must be finite (found NaN or inf)")
    if (boxes[:, 2] < boxes[:, 0]).any() or (boxes[:, 3] < boxes[:, 1]).any():
        raise ValueError("boxes must be x1, y1, x2, y2 with x2 >= x1 and y2 >= y1")
    return boxes, scores
