"""The pass detector on the reads of yard_cam.ts, and on a parked plate: when a track is
reported, and when it is not (deduplication, time going backwards, the best read)."""

import dataclasses
from collections.abc import Iterable, Sequence

import numpy as np
import pytest

from streamer.domain.frames import Frame, FrameResult, PlateReading
from streamer.domain.plate_formats import PlateFormats
from streamer.domain.plate_pass import PlatePass
from streamer.tracking.pass_params import PassParams
from streamer.tracking.passes import PassDetector
from streamer.tracking.tracker import TrackerParams
from tests.streamer.tracking.pass_rules import CAMERA, EVERY_READ, params_with

IMAGE = np.zeros((4, 4, 3), dtype=np.uint8)


# ---- yard_cam.ts: 15 fps, 120 frames; the reads of the plate_recognition model, per frame.
FPS = 15.0
PTS0 = 12169.5
# The black car is parked for the whole clip. It reads C567AM76 in frames 0-17 except 15,
# O567AM76 (its plate) in 15 and 18-119.
BLACK_BOX = (1523.0, 336.0, 1577.0, 369.0)
BLACK_JITTER = (
    (0.0, 0.0, 0.0, 0.0),
    (0.6, -0.4, 0.5, -0.3),
    (-0.5, 0.3, -0.4, 0.5),
    (0.3, 0.5, 0.2, 0.4),
)
BLACK_DET_SCORES = (0.66, 0.68, 0.67, 0.65, 0.69)
BLACK_TEXT_SCORES = (0.95, 0.96, 0.94, 0.97, 0.93)
# The silver car Y836XH76 drives off, from [81,364,135,401] at frame 3 to [71,350,122,381]
# at frame 24: frame -> (text, det_score, text_score).
SILVER = {
    3: ("YAKEXH7O", 0.41, 0.81),
    6: ("Y83KKXH7", 0.44, 0.84),
    7: ("Y03EXH7", 0.36, 0.82),
    8: ("YY35XHE7", 0.47, 0.86),
    9: ("Y836XH7", 0.52, 0.90),
    10: ("Y746XO7Y", 0.38, 0.85),
    11: ("Y836XH7Y", 0.49, 0.91),
    12: ("Y836XH76", 0.55, 0.97),
    13: ("Y836XH7", 0.33, 0.88),
    14: ("Y836XAH7O7", 0.30, 0.80),
    15: ("Y836XH76", 0.53, 0.96),
    16: ("Y836XH7Y7", 0.42, 0.87),
    17: ("Y83CXO76", 0.45, 0.89),
    18: ("Y836XH76", 0.54, 0.98),
    19: ("Y83CXH77", 0.39, 0.90),
    21: ("Y836XH76", 0.50, 0.95),
    22: ("Y836XH76", 0.48, 0.96),
    23: ("Y836XH76", 0.46, 0.94),
    24: ("O7CXHO7", 0.31, 0.83),
}
SILVER_FIRST = (81.0, 364.0, 135.0, 401.0)
SILVER_LAST = (71.0, 350.0, 122.0, 381.0)
# Isolated false reads near where the silver car left: frame -> (text, box, det, text score).
FALSE_READS = {
    33: ("Y846XYY6", (74.0, 336.0, 120.0, 365.0), 0.43, 0.72),
    38: ("EO6HYO6", (80.0, 330.0, 122.0, 358.0), 0.41, 0.66),
}
CLIP_PASSES = ["O567AM76", "Y836XH76"]


def _frame(index: int, pts_s: float, camera: str = CAMERA) -> Frame:
    return Frame(camera, index, pts_s, 1.7e9 + pts_s, 1000.0 + pts_s, IMAGE)


def _clip_result(i: int) -> FrameResult:
    jitter = BLACK_JITTER[i % 4]
    black_text = "C567AM76" if i < 18 and i != 15 else "O567AM76"
    plates = [
        PlateReading(
            tuple(b + d for b, d in zip(BLACK_BOX, jitter, strict=True)),  # type: ignore[arg-type]
            BLACK_DET_SCORES[i % 5],
            black_text,
            BLACK_TEXT_SCORES[i % 5],
        )
    ]
    if i in SILVER:
        text, det_score, text_score = SILVER[i]
        a = (i - 3) / 21
        box = tuple(
            round(f + (last - f) * a, 1) for f, last in zip(SILVER_FIRST, SILVER_LAST, strict=True)
        )
        plates.append(PlateReading(box, det_score, text, text_score))  # type: ignore[arg-type]
    if i in FALSE_READS:
        text, box, det_score, text_score = FALSE_READS[i]
        plates.append(PlateReading(box, det_score, text, text_score))  # type: ignore[arg-type]
    return FrameResult(_frame(i, PTS0 + i / FPS), tuple(plates))


def _clip(every: int, drop: float = 0.0, seed: int = 0) -> list[FrameResult]:
    indices = list(range(0, 120, every))
    if drop:
        rng = np.random.default_rng(seed)
        indices = [i for i in indices if rng.random() >= drop]
    return [_clip_result(i) for i in indices]


def _run(
    results: Iterable[FrameResult], detector: PassDetector | None = None
) -> tuple[list[PlatePass], PassDetector]:
    detector = detector or PassDetector(
        CAMERA, TrackerParams.defaults(), params_with(**EVERY_READ), PlateFormats(), 0.5
    )
    passes = []
    for result in results:
        passes += detector.update(result)
    passes += detector.flush()
    return passes, detector


@pytest.mark.parametrize("every", [1, 3])
def test_the_clip_gives_its_two_passes(every: int) -> None:
    passes, detector = _run(_clip(every))
    assert sorted(p.text for p in passes) == CLIP_PASSES
    assert len({p.track_id for p in passes}) == 2
    assert detector.suppressed == 0
    black = next(p for p in passes if p.text == "O567AM76")
    silver = next(p for p in passes if p.text == "Y836XH76")
    # The parked car is decided early; the silver car when its track ends.
    assert black.reason == "confident"
    assert black.first_seen.index == 0
    assert black.time_s - PTS0 < PassParams.defaults().max_delay_s
    assert silver.reason == "track_ended"
    assert silver.first_seen.index == 3
    assert silver.best.text == "Y836XH76" and silver.best_frame.index == 12
    for p in passes:
        assert p.camera == CAMERA
        assert p.best_frame.image is IMAGE and p.first_seen.image.size == 0
        assert p.exact >= PassParams.defaults().min_reads
        assert p.candidates[0][0] == p.text


@pytest.mark.parametrize("every", [1, 3])
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_the_clip_with_dropped_frames_gives_the_same_two(every: int, seed: int) -> None:
    passes, _ = _run(_clip(every, drop=0.4, seed=seed))
    assert sorted(p.text for p in passes) == CLIP_PASSES


@pytest.mark.parametrize("every", [1, 3])
def test_dropped_frames_never_give_a_wrong_pass(every: int) -> None:
    # Some drop patterns leave the silver car one exact read of Y836XH76 or none: it is then
    # not reported at all (min_reads=2). But nothing else is ever reported, and nothing twice.
    for seed in range(50):
        passes, _ = _run(_clip(every, drop=0.4, seed=seed))
        texts = [p.text for p in passes]
        assert "O567AM76" in texts, f"seed {seed}"
        assert set(texts) <= set(CLIP_PASSES) and len(texts) == len(set(texts)), f"seed {seed}"


def test_the_span_guard_is_what_keeps_the_early_misread_out() -> None:
    # Without confident_span_s, 17 reads of C567AM76 in 1.2 s at 15 fps look confident.
    detector = PassDetector(CAMERA, passes=params_with(confident_span_s=0.0, **EVERY_READ))
    passes, _ = _run(_clip(1), detector)
    assert "C567AM76" in [p.text for p in passes]


def _parked(
    texts: Sequence[str], fps: float = 5.0, start: float = 0.0, box: Sequence[float] = BLACK_BOX
) -> list[FrameResult]:
    """One plate at a fixed place, one read per frame; '' is a frame without it."""
    results = []
    for i, text in enumerate(texts):
        plates = (PlateReading(tuple(box), 0.7, text, 0.95),) if text else ()  # type: ignore[arg-type]
        results.append(FrameResult(_frame(i, start + i / fps), plates))
    return results


def test_max_delay_reports_a_parked_car_that_never_gets_confident() -> None:
    # One read in three has a wrong digit: the vote stays at 2/3, under confident_share.
    texts = ["A123BC77", "A123BC77", "A128BC77"] * 20  # 12 s at 5 fps
    detector = PassDetector(CAMERA, passes=params_with(max_delay_s=6.0, **EVERY_READ))
    for result in _parked(texts):
        passes = detector.update(result)
        if passes:
            break
    assert [(p.text, p.reason) for p in passes] == [("A123BC77", "max_delay")]
    assert result.frame.pts_s == pytest.approx(6.0)
    # 31 reads at 6.0 s, 21 of them exact: 21/31 on one look; over six seconds, three looks.
    share = 21 / 31
    assert passes[0].confidence == pytest.approx(share**3 / (share**3 + (1 - share) ** 3))
    assert detector.flush() == []  # reported once


def test_max_delay_waits_until_the_vote_qualifies() -> None:
    # At 6 s the vote (A123BC77) has one exact read only; a second one comes at 8 s.
    texts = ["A123BC77"] + ["A128BC77", "A123BO77"] * 20
    texts[40] = "A123BC77"
    detector = PassDetector(CAMERA, passes=params_with(**EVERY_READ))
    passes = []
    for result in _parked(texts):
        passes += [(p, result.frame.index) for p in detector.update(result)]
    assert [(p.text, p.reason, index) for p, index in passes] == [("A123BC77", "max_delay", 40)]


@pytest.mark.parametrize(("min_confidence", "reported"), [(0.5, False), (0.3, True)])
def test_a_pass_under_min_confidence_is_withheld(min_confidence: float, reported: bool) -> None:
    # A parked plate whose first letter the network cannot tell: C 0.4, O 0.35, H 0.25.
    doubt = (("C", 0.4), ("O", 0.35), ("H", 0.25))
    probs = (doubt, *(((c, 1.0),) for c in "567AM76"))
    params = params_with(min_confidence=min_confidence)
    detector = PassDetector(CAMERA, passes=params)
    passes = []
    for i in range(20):
        plate = PlateReading(BLACK_BOX, 0.7, "C567AM76", 0.95, probs)
        passes += detector.update(FrameResult(_frame(i, i / 5), (plate,)))
    passes += detector.flush()
    assert [p.text for p in passes] == (["C567AM76"] if reported else [])
    assert [p.confidence for p in passes] == ([pytest.approx(0.4)] if reported else [])
    assert detector.unsure == (0 if reported else 1)
    # Not silent: the withheld pass is handed on as such, once, with its confidence.
    withheld = detector.take_withheld()
    assert [(w.text, w.withheld, w.reason) for w in withheld] == (
        [] if reported else [("C567AM76", "low_confidence", "flush")]
    )
    assert [w.confidence for w in withheld] == ([] if reported else [pytest.approx(0.4)])
    assert detector.take_withheld() == []


def test_every_track_ends_with_a_fate() -> None:
    # Four tracks, 20 s apart: a plate (reported), a valid text read once (withheld: few
    # reads), a text of no plate format, and the first plate again (a duplicate).
    texts = (
        ["O567AM76"] * 5
        + [""] * 95
        + ["B840CK197"]
        + [""] * 99
        + ["EO6HYO6"] * 4
        + [""] * 96
        + ["O567AM76"] * 5
    )
    detector = PassDetector(CAMERA, passes=params_with(**EVERY_READ))
    fates = []
    detector.on_fate = fates.append
    passes, _ = _run(_parked(texts), detector)
    assert [p.text for p in passes] == ["O567AM76"]
    assert [(f.fate, f.text, f.detail) for f in fates] == [
        ("reported", "O567AM76", ""),
        ("withheld", "B840CK197", "few_reads"),
        ("no_valid_text", "EO6HYO6", ""),
        ("duplicate", "O567AM76", "O567AM76"),
    ]
    assert [(f.reads, f.exact) for f in fates[:2]] == [(5, 5), (1, 1)]
    assert (detector.suppressed, detector.few_reads, detector.unsure) == (1, 1, 0)
    [withheld] = detector.take_withheld()
    assert (withheld.text, withheld.withheld, withheld.reason) == (
        "B840CK197",
        "few_reads",
        "track_ended",
    )


def test_the_last_two_reads_before_the_end_are_reported() -> None:
    # Nothing for 4 s, then the plate in the last two sampled frames: the end decides it.
    passes, detector = _run(_parked([""] * 20 + ["B840CK197"] * 2))
    assert [(p.text, p.reason, p.exact) for p in passes] == [("B840CK197", "flush", 2)]
    assert detector.take_withheld() == []


def test_a_track_ending_reports_it() -> None:
    texts = ["B840CK197"] * 6 + [""] * 20  # seen for 1.2 s at 5 fps, then gone
    passes = []
    detector = PassDetector(CAMERA, passes=params_with(**EVERY_READ))
    for result in _parked(texts):
        passes += [(p, result.frame.index) for p in detector.update(result)]
    # Last seen at 1.0 s: the track ends at the first frame more than 2.0 s later.
    assert [(p.text, p.reason, index) for p, index in passes] == [("B840CK197", "track_ended", 16)]
    only = passes[0][0]
    assert (only.first_seen.index, only.last_seen.index, only.reads) == (0, 5, 6)


def test_flush_reports_what_is_still_tracked() -> None:
    passes, _ = _run(_parked(["B840CK197"] * 4))
    assert [(p.text, p.reason) for p in passes] == [("B840CK197", "flush")]


@pytest.mark.parametrize(
    ("texts", "why"),
    [
        (["B840CK197"], "one read: the track is never confirmed"),
        (["B840CK197", "B840CK19"], "one exact read: under min_reads"),
        (["EO6HYO6"] * 10, "not a plate format"),
    ],
)
def test_what_does_not_qualify_is_not_reported(texts: list[str], why: str) -> None:
    passes, _ = _run(_parked(texts))
    assert passes == [], why


@pytest.mark.parametrize(("window_s", "expected"), [(300.0, 1), (10.0, 2)])
def test_dedup_suppresses_the_same_text(window_s: float, expected: int) -> None:
    # The same car passes twice, 20 s apart: two tracks.
    texts = (["O567AM76"] * 5 + [""] * 95) * 2
    detector = PassDetector(CAMERA, passes=params_with(dedup_window_s=window_s, **EVERY_READ))
    passes, _ = _run(_parked(texts), detector)
    assert [p.text for p in passes] == ["O567AM76"] * expected
    assert len({p.track_id for p in passes}) == expected
    assert detector.suppressed == 2 - expected


def test_dedup_is_per_text() -> None:
    texts = ["O567AM76"] * 5 + [""] * 20 + ["Y836XH76"] * 5
    passes, detector = _run(_parked(texts))
    assert [p.text for p in passes] == ["O567AM76", "Y836XH76"]
    assert detector.suppressed == 0


def test_time_going_backwards_flushes_and_keeps_dedup() -> None:
    # The file loops after 1.4 s: the car is reported at the jump, and not again after it.
    loop = _parked(["O567AM76"] * 8, start=500.0)
    frames = [
        FrameResult(dataclasses.replace(r.frame, index=k, monotonic=1000.0 + k / 5), r.plates)
        for k, r in enumerate(loop + loop)
    ]
    passes, detector = [], PassDetector(CAMERA, passes=params_with(**EVERY_READ))
    for result in frames:
        passes += [(p, result.frame.index) for p in detector.update(result)]
    passes += [(p, -1) for p in detector.flush()]
    assert [(p.reason, index) for p, index in passes] == [("flush", 8)]
    assert passes[0][0].time_s == pytest.approx(501.4)  # the time of the last frame before it
    assert detector.suppressed == 1


def test_best_read_and_frame_are_kept() -> None:
    results = _parked(["O567AM76"] * 4)
    best = PlateReading(BLACK_BOX, 0.9, "O567AM76", 0.99)
    results[2] = FrameResult(results[2].frame, (best,))
    ignored = PlateReading(BLACK_BOX, 0.99, "O567AM76", 0.4)  # under min_text_score
    results[3] = FrameResult(results[3].frame, (ignored,))
    passes, _ = _run(results)
    assert passes[0].best == best and passes[0].best_frame is results[2].frame
    assert passes[0].first_seen.index == 0 and passes[0].last_seen.index == 3


def test_a_frame_of_another_camera_is_refused() -> None:
    with pytest.raises(ValueError, match="'gate'"):
        PassDetector(CAMERA).update(FrameResult(_frame(0, 0.0, camera="gate"), ()))
