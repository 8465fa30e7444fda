import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from streamer.config import TrackerConfig
from streamer.tracking.tracker import PlateTracker, TrackerParams, iou_matrix

FPS = 15.0


def _params(**changes: Any) -> TrackerParams:
    """Tracker parameters from a ``tracker:`` section with ``changes`` (the defaults else)."""
    return TrackerParams.from_config(TrackerConfig(**changes))


def _boxes(*rows: Sequence[float]) -> np.ndarray:
    return np.array(rows, dtype=np.float64).reshape(-1, 4)


def _scores(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float64)


NONE = (_boxes(), _scores())


@pytest.mark.parametrize(
    "boxes",
    [
        # A plate driving right, 8 px a frame.
        [
            [100, 300, 154, 333],
            [108, 300, 162, 333],
            [116, 301, 170, 334],
            [124, 301, 178, 334],
            [132, 302, 186, 335],
            [140, 302, 194, 335],
            [148, 303, 202, 336],
            [156, 303, 210, 336],
        ],
        # The clip's silver car, drifting up-left and shrinking.
        [
            [81.0, 364.0, 135.0, 401.0],
            [79.6, 362.0, 132.6, 398.1],
            [78.1, 360.0, 130.1, 395.3],
            [76.7, 358.0, 127.7, 392.4],
            [75.3, 356.0, 125.3, 389.6],
            [73.9, 354.0, 122.9, 386.7],
            [72.4, 352.0, 124.4, 383.9],
            [71.0, 350.0, 122.0, 381.0],
        ],
        # Approaching fast and growing: 20 px a frame, a pixel taller each frame.
        [
            [600, 500, 660, 530],
            [620, 510, 682, 541],
            [640, 520, 704, 552],
            [660, 530, 726, 563],
            [680, 540, 748, 574],
            [700, 550, 770, 585],
        ],
    ],
)
def test_one_id_follows_a_moving_plate(boxes: list[list[float]]) -> None:
    tracker = PlateTracker(TrackerParams.defaults())
    ids = set()
    for i, box in enumerate(boxes):
        update = tracker.update(i / FPS, _boxes(box), _scores(0.6))
        assert len(update.assignments) == 1
        assert update.assignments[0][0] == 0
        ids.add(update.assignments[0][1])
        if i == 0:
            assert update.tentative == [update.assignments[0][1]]
            assert update.confirmed_assignments() == []
        if i == 1:
            assert update.confirmed == [update.assignments[0][1]]
            assert update.tentative == []
    assert len(ids) == 1
    assert tracker.is_confirmed(ids.pop())


def _crossing(i: int) -> tuple[list[int], list[int]]:
    # A drives right and B left at 12 px a frame; they overlap for several frames.
    a = [100 + 12 * i, 300, 154 + 12 * i, 333]
    b = [340 - 12 * i, 310, 394 - 12 * i, 343]
    return a, b


@pytest.mark.parametrize("every", [1, 3])
def test_two_crossing_plates_keep_their_ids(every: int) -> None:
    tracker = PlateTracker(TrackerParams.defaults())
    id_a = id_b = None
    for i in range(0, 21, every):
        a, b = _crossing(i)
        # Detection order swaps every frame, so ids cannot follow the index.
        swapped = i % 2 == 1
        rows = (b, a) if swapped else (a, b)
        update = tracker.update(i / FPS, _boxes(*rows), _scores(0.7, 0.7))
        by_det = dict(update.assignments)
        got_a, got_b = (by_det[1], by_det[0]) if swapped else (by_det[0], by_det[1])
        if id_a is None:
            id_a, id_b = got_a, got_b
        assert (got_a, got_b) == (id_a, id_b), f"frame {i}"
    assert id_a != id_b


@pytest.mark.parametrize(
    "frames",
    [
        # Two plates side by side, 4 px apart, with a pixel of jitter.
        [
            [[1000, 400, 1054, 433], [1058, 401, 1112, 434]],
            [[1001, 400, 1055, 433], [1057, 400, 1111, 433]],
            [[999, 401, 1053, 434], [1058, 402, 1112, 435]],
            [[1000, 399, 1054, 432], [1059, 401, 1113, 434]],
            [[1001, 400, 1055, 433], [1058, 400, 1112, 433]],
        ],
        # One above the other, touching.
        [
            [[500, 300, 554, 333], [500, 333, 554, 366]],
            [[501, 301, 555, 334], [499, 334, 553, 367]],
            [[500, 300, 554, 333], [500, 332, 554, 365]],
            [[499, 300, 553, 333], [501, 333, 555, 366]],
        ],
    ],
)
def test_adjacent_plates_keep_their_ids(frames: list[list[list[float]]]) -> None:
    tracker = PlateTracker(TrackerParams.defaults())
    first = None
    for i, rows in enumerate(frames):
        update = tracker.update(i / FPS, _boxes(*rows), _scores(0.7, 0.7))
        ids = [tid for _, tid in update.assignments]
        if first is None:
            first = ids
        assert ids == first
    assert first is not None and len(set(first)) == 2


@pytest.mark.parametrize("gap_s", [0.5, 1.0, 1.9])
def test_a_track_survives_a_gap_shorter_than_the_buffer(gap_s: float) -> None:
    tracker = PlateTracker(_params(lost_track_buffer_s=2.0))
    box = _boxes((1523, 336, 1577, 369))
    tracker.update(0.0, box, _scores(0.67))
    tid = tracker.update(0.1, box, _scores(0.67)).assignments[0][1]
    t = 0.1
    while t + 0.1 < 0.1 + gap_s:  # frames in which the plate is not detected
        t += 0.1
        update = tracker.update(t, *NONE)
        assert update.ended == [] and update.assignments == []
    update = tracker.update(0.1 + gap_s, box, _scores(0.67))
    assert update.assignments == [(0, tid)]


def test_a_track_ends_after_the_buffer() -> None:
    tracker = PlateTracker(_params(lost_track_buffer_s=2.0))
    box = _boxes((1523, 336, 1577, 369))
    tracker.update(0.0, box, _scores(0.67))
    tid = tracker.update(0.2, box, _scores(0.67)).assignments[0][1]
    for t in (0.4, 1.0, 2.0, 2.2):  # unseen for 2.0 s at most: still live
        assert tracker.update(t, *NONE).ended == []
    assert tracker.track_ids == [tid]
    assert tracker.update(2.4, *NONE).ended == [tid]
    assert tracker.track_ids == []
    # The same plate again is a new track.
    assert tracker.update(2.5, box, _scores(0.67)).assignments[0][1] != tid


def test_a_track_rejoins_after_a_stall_with_no_frames() -> None:
    # No frames at all for 3 s (a stalled camera): the parked plate is still the same track.
    tracker = PlateTracker(_params(lost_track_buffer_s=2.0))
    box = _boxes((1523, 336, 1577, 369))
    tracker.update(0.0, box, _scores(0.67))
    tid = tracker.update(0.2, box, _scores(0.67)).assignments[0][1]
    update = tracker.update(3.2, box, _scores(0.67))
    assert update.assignments == [(0, tid)] and update.ended == []


@pytest.mark.parametrize("low", [0.2, 0.25, 0.39])
def test_low_score_detections_start_weak_tracks_that_they_never_confirm(low: float) -> None:
    tracker = PlateTracker(_params(high_score=0.4, low_score=0.2, min_hits=2))
    box = _boxes((81, 364, 135, 401))
    first = tracker.update(0.0, box, _scores(low))
    assert len(first.assignments) == 1
    tid = first.assignments[0][1]
    for i in range(1, 20):  # however often low-score detections match it
        update = tracker.update(i / FPS, box, _scores(low))
        assert update.assignments == [(0, tid)]
        assert update.tentative == update.weak == [tid]
        assert update.confirmed == []
    assert tracker.is_weak(tid) and not tracker.is_confirmed(tid)
    # The first high-score detection confirms it: the same id, its earlier reads kept.
    update = tracker.update(20 / FPS, box, _scores(0.6))
    assert update.assignments == [(0, tid)] and update.confirmed == [tid]
    assert update.tentative == update.weak == []
    assert not tracker.is_weak(tid)


def test_a_weak_track_is_dropped_unconfirmed() -> None:
    tracker = PlateTracker(_params(high_score=0.4, low_score=0.2, lost_track_buffer_s=1.0))
    box = _boxes((81, 364, 135, 401))
    tid = tracker.update(0.0, box, _scores(0.3)).assignments[0][1]
    tracker.update(0.2, box, _scores(0.3))
    update = tracker.update(1.5, _boxes(), _scores())
    assert update.dropped == [tid] and update.ended == []
    assert tracker.track_ids == []


def test_a_high_score_detection_starts_a_strong_track_beside_a_weak_one() -> None:
    tracker = PlateTracker(_params(high_score=0.4, low_score=0.2, min_hits=1))
    boxes = _boxes((81, 364, 135, 401), (1523, 336, 1577, 369))
    update = tracker.update(0.0, boxes, _scores(0.3, 0.6))
    (weak_det, weak), (strong_det, strong) = update.assignments
    assert (weak_det, strong_det) == (0, 1)
    assert update.confirmed == [strong]  # min_hits 1 confirms a strong track at once...
    assert update.weak == update.tentative == [weak]  # ...never a weak one


@pytest.mark.parametrize("low", [0.2, 0.3, 0.39])
def test_low_score_detections_extend_tracks(low: float) -> None:
    tracker = PlateTracker(_params(high_score=0.4, low_score=0.2, lost_track_buffer_s=2.0))
    boxes = [(81 - 0.5 * i, 364 - 0.7 * i, 135 - 0.6 * i, 401 - 1.0 * i) for i in range(60)]
    tracker.update(0.0, _boxes(boxes[0]), _scores(0.55))
    tid = tracker.update(1 / FPS, _boxes(boxes[1]), _scores(0.5)).assignments[0][1]
    for i in range(2, 60):  # four seconds of faint detections: longer than the buffer
        update = tracker.update(i / FPS, _boxes(boxes[i]), _scores(low))
        assert update.assignments == [(0, tid)], f"frame {i}"
        assert update.ended == []


def test_below_low_score_is_ignored() -> None:
    tracker = PlateTracker(_params(low_score=0.2, lost_track_buffer_s=1.0))
    box = _boxes((81, 364, 135, 401))
    tracker.update(0.0, box, _scores(0.6))
    tid = tracker.update(0.1, box, _scores(0.6)).assignments[0][1]
    assert tracker.update(0.2, box, _scores(0.1)).assignments == []
    assert tracker.update(1.2, box, _scores(0.1)).ended == [tid]


def test_time_going_backwards_ends_every_track() -> None:
    tracker = PlateTracker(TrackerParams.defaults())
    boxes = _boxes((1523, 336, 1577, 369), (81, 364, 135, 401))
    tracker.update(100.0, boxes, _scores(0.67, 0.5))
    before = tracker.update(100.1, boxes, _scores(0.67, 0.5))
    ids = sorted(tid for _, tid in before.assignments)
    tracker.update(100.2, boxes[:1], _scores(0.67))
    assert tracker.update(100.25, *NONE).ended == []
    after = tracker.update(3.0, boxes, _scores(0.67, 0.5))  # camera reconnected: pts restarted
    assert sorted(after.ended) == ids
    assert {tid for _, tid in after.assignments}.isdisjoint(ids)
    assert after.tentative == [tid for _, tid in after.assignments]


def test_tentative_tracks_are_dropped_not_ended() -> None:
    tracker = PlateTracker(_params(lost_track_buffer_s=2.0, min_hits=2))
    update = tracker.update(0.0, _boxes((74, 336, 120, 365)), _scores(0.45))
    tid = update.assignments[0][1]
    assert update.tentative == [tid] and not tracker.is_confirmed(tid)
    assert tracker.update(1.0, *NONE).dropped == []
    update = tracker.update(2.1, *NONE)
    assert update.dropped == [tid] and update.ended == []


def test_min_hits_one_confirms_at_once() -> None:
    tracker = PlateTracker(_params(min_hits=1))
    update = tracker.update(0.0, _boxes((74, 336, 120, 365)), _scores(0.45))
    assert update.confirmed == [update.assignments[0][1]] and update.tentative == []


def test_flush_ends_confirmed_tracks_and_drops_tentative_ones() -> None:
    tracker = PlateTracker(TrackerParams.defaults())
    a, b = (1523, 336, 1577, 369), (81, 364, 135, 401)
    tracker.update(0.0, _boxes(a), _scores(0.67))
    update = tracker.update(0.1, _boxes(a, b), _scores(0.67, 0.5))
    confirmed, tentative = update.assignments[0][1], update.assignments[1][1]
    assert update.tentative == [tentative]
    assert tracker.flush() == [confirmed]
    assert tracker.track_ids == [] and tracker.flush() == []


def test_ids_are_counted_per_tracker() -> None:
    box, score = _boxes((10, 10, 60, 40)), _scores(0.9)
    first = PlateTracker().update(0.0, box, score).assignments
    second = PlateTracker().update(0.0, box, score).assignments
    assert first == second == [(0, 1)]


def test_predicted_box_follows_a_constant_velocity() -> None:
    tracker = PlateTracker(TrackerParams.defaults())
    for i in range(15):  # 60 px/s right, 1 s
        x = 100 + 4 * i
        update = tracker.update(i / FPS, _boxes((x, 300, x + 54, 333)), _scores(0.6))
    tid = update.assignments[0][1]
    tracker.update(2.0, *NONE)  # one second later, unseen: extrapolated
    predicted = tracker.predicted_box(tid)
    np.testing.assert_allclose(predicted, [100 + 4 * 14 + 60, 300, 154 + 4 * 14 + 60, 333], atol=6)


@pytest.mark.parametrize(
    ("boxes", "scores", "match"),
    [
        (np.zeros((2, 3)), np.zeros(2), r"boxes must have shape \[N, 4\].*\(2, 3\)"),
        (np.zeros((2, 4)), np.zeros(3), r"scores must have shape \[N\].*\(3,\)"),
        (np.array([[0, 0, np.nan, 1]]), np.ones(1), "finite"),
        (np.array([[10, 0, 5, 1]]), np.ones(1), "x2 >= x1"),
    ],
)
def test_bad_input_is_refused(boxes: np.ndarray, scores: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PlateTracker().update(0.0, boxes, scores)


def test_params_come_from_the_tracker_section() -> None:
    fields = {f.name for f in dataclasses.fields(TrackerParams)}
    assert fields == set(TrackerConfig.model_fields)
    assert _params(min_hits=3) == dataclasses.replace(TrackerParams.defaults(), min_hits=3)
    assert PlateTracker().params == TrackerParams.from_config(TrackerConfig())


def test_iou_matrix() -> None:
    a = _boxes((0, 0, 10, 10), (20, 20, 30, 30))
    b = _boxes((5, 0, 15, 10), (0, 0, 10, 10), (100, 100, 101, 101))
    np.testing.assert_allclose(iou_matrix(a, b), [[1 / 3, 1.0, 0.0], [0.0, 0.0, 0.0]])
