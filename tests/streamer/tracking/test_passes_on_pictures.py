"""The pass detector on small pictures: a still image is one piece of evidence, weak evidence
is corrected, ``updates`` and ``decide``, the live view's labels, known plates, a reload."""

from collections.abc import Iterable, Sequence

import numpy as np
import pytest

from streamer.domain.frames import Frame, FrameResult, PlateReading
from streamer.domain.known_plates import KnownList, KnownPlates, Match
from streamer.domain.plate_pass import PlatePass
from streamer.tracking.passes import PassDetector
from tests.streamer.tracking.pass_rules import CAMERA, EVERY_READ, params_with

# ---- Evidence and corrections, on small pictures: a plate at PLATE_BOX in a 60x200 frame.
PLATE_BOX = (40.0, 20.0, 120.0, 40.0)


def _picture(seed: int) -> np.ndarray:
    """A frame whose plate region is a texture of its own: ``seed`` is the picture."""
    image = np.full((60, 200, 3), 90, np.uint8)
    texture = np.random.default_rng(seed).integers(0, 255, (20, 80, 1), np.uint8)
    image[20:40, 40:120] = texture
    return image


def _scene(reads: Sequence[tuple[str, int]], fps: float = 5.0) -> list[FrameResult]:
    """One plate at PLATE_BOX, one (text, picture seed) per frame; the same seed is the same
    still picture, read again."""
    pictures = {seed: _picture(seed) for _, seed in reads}
    return [
        FrameResult(
            Frame(CAMERA, i, i / fps, 1.7e9 + i / fps, 1000.0 + i / fps, pictures[seed]),
            (PlateReading(PLATE_BOX, 0.7, text, 0.95),),
        )
        for i, (text, seed) in enumerate(reads)
    ]


def _events(detector: PassDetector, results: Iterable[FrameResult]) -> list[tuple[PlatePass, int]]:
    out = []
    for result in results:
        out += [(p, result.frame.index) for p in detector.update(result)]
    out += [(p, -1) for p in detector.flush()]
    return out


def test_a_still_image_is_one_piece_of_evidence_however_long_it_stands() -> None:
    # A car waits 12 s at a barrier: its still picture reads C567AM76 every time. Then it
    # moves: new pictures read O567AM76. One pass, and it reads O567AM76.
    reads = [("C567AM76", 0)] * 60 + [("O567AM76", seed) for seed in range(1, 6)]
    events = _events(PassDetector(CAMERA), _scene(reads))
    assert [(p.text, p.version, p.reason, i) for p, i in events] == [
        # At the second piece of evidence the vote is a tie: the third decides it.
        ("O567AM76", 1, "max_delay", 61)
    ]
    only = events[0][0]
    assert (only.reads, only.evidence) == (62, 3)


def test_counting_every_read_is_what_reported_the_misread() -> None:
    # The same scene with evidence off: 30 reads of the still picture by max_delay_s.
    reads = [("C567AM76", 0)] * 60 + [("O567AM76", seed) for seed in range(1, 6)]
    detector = PassDetector(CAMERA, passes=params_with(updates=False, **EVERY_READ))
    events = _events(detector, _scene(reads))
    assert [(p.text, p.reason) for p, _ in events] == [("C567AM76", "confident")]


def test_a_still_image_alone_waits_for_the_plate_to_leave() -> None:
    # Never moves: reported when the stream ends (a track ending), never at max_delay_s.
    events = _events(PassDetector(CAMERA), _scene([("A123BC77", 0)] * 40))
    assert [(p.text, p.reason, p.evidence) for p, _ in events] == [("A123BC77", "flush", 1)]


# Two pictures misread for 6 s, then the plate seen well on 37 new ones.
WEAK_THEN_STRONG = [("C567AM76", 1)] * 15 + [("C567AM76", 2)] * 16
WEAK_THEN_STRONG += [("O567AM76", seed) for seed in range(3, 40)]


def test_weak_evidence_contradicted_by_strong_evidence_is_corrected() -> None:
    # Two new pictures misread, reported at max_delay_s; then the plate is seen well, over
    # many new pictures: one correction with the same event id.
    reads = WEAK_THEN_STRONG
    detector = PassDetector(CAMERA)
    events = _events(detector, _scene(reads))
    assert [(p.text, p.version, p.previous_text, p.reason) for p, _ in events] == [
        ("C567AM76", 1, None, "max_delay"),
        ("O567AM76", 2, "C567AM76", "confident"),
    ]
    first, update = (p for p, _ in events)
    assert first.event_id == update.event_id and first.track_id == update.track_id
    assert events[0][1] == 30 and update.evidence > first.evidence
    assert detector.corrections == 1


def test_a_correction_at_the_end_of_the_track() -> None:
    # Not enough to be confident of the new text, but it is what the whole pass says.
    reads = [("C567AM76", 1)] * 15 + [("C567AM76", 2)] * 16 + [("O567AM76", s) for s in range(3, 9)]
    events = _events(PassDetector(CAMERA), _scene(reads))
    assert [(p.text, p.version, p.reason) for p, _ in events] == [
        ("C567AM76", 1, "max_delay"),
        ("O567AM76", 2, "flush"),
    ]


def test_updates_off_keeps_the_first_decision() -> None:
    reads = WEAK_THEN_STRONG
    events = _events(PassDetector(CAMERA, passes=params_with(updates=False)), _scene(reads))
    assert [(p.text, p.version) for p, _ in events] == [("C567AM76", 1)]


def test_deciding_sure_waits_for_confidence_or_the_end() -> None:
    reads = WEAK_THEN_STRONG
    events = _events(PassDetector(CAMERA, passes=params_with(decide="sure")), _scene(reads))
    assert [(p.text, p.version, p.reason) for p, _ in events] == [("O567AM76", 1, "confident")]


def test_the_live_view_labels_the_decision_and_the_raw_read() -> None:
    reads = [("C567AM76", 1)] * 15 + [("C567AM76", 2)] * 16 + [("O567AM76", 3)]
    detector = PassDetector(CAMERA)
    for result in _scene(reads):
        detector.update(result)
    (plate,) = detector.last_tracked
    assert (plate.text, plate.read, plate.decided, plate.confirmed) == (
        "C567AM76",
        "O567AM76",
        True,
        True,
    )
    fresh = PassDetector(CAMERA)
    for result in _scene(reads[:3]):
        fresh.update(result)
    (plate,) = fresh.last_tracked
    assert (plate.text, plate.decided) == ("C567AM76", False)


@pytest.mark.parametrize("snap", [False, True])
def test_a_known_plate_is_matched_and_snapped_to(snap: bool) -> None:
    # The recogniser misreads two characters of a plate the site knows, in every frame.
    known = KnownPlates([KnownList("staff", ("O567AM76",), max_distance=2, snap=snap)])
    detector = PassDetector(CAMERA, known=known)
    events = _events(detector, _scene([("C567AC76", seed) for seed in range(12)]))
    ((only, _),) = events
    assert only.match == Match("staff", "O567AM76", 2, False, snap)
    if snap:
        assert (only.text, only.voted_text) == ("O567AM76", "C567AC76")
    else:
        assert (only.text, only.voted_text) == ("C567AC76", None)


def test_a_text_known_to_no_list_has_no_match() -> None:
    known = KnownPlates([KnownList("staff", ("A123BC77",), max_distance=1, snap=True)])
    events = _events(
        PassDetector(CAMERA, known=known), _scene([("O567AM76", s) for s in range(12)])
    )
    assert [(p.text, p.match) for p, _ in events] == [("O567AM76", None)]


def test_with_updates_off_the_live_view_still_shows_the_decision() -> None:
    detector = PassDetector(CAMERA, passes=params_with(updates=False))
    for result in _scene(WEAK_THEN_STRONG[:34]):
        detector.update(result)
    (plate,) = detector.last_tracked
    assert (plate.text, plate.read, plate.decided) == ("C567AM76", "O567AM76", True)


def test_reconfigured_rules_decide_what_comes_next() -> None:
    # A reload gives a running camera a known-plate list and another min_reads.
    detector = PassDetector(CAMERA)
    first = _events(detector, _scene([("C567AC76", seed) for seed in range(12)]))
    assert [p.match for p, _ in first] == [None]
    known = KnownPlates([KnownList("staff", ("O567AM76",), max_distance=2, snap=True)])
    tracker, formats = detector._tracker.params, detector.formats
    detector.reconfigure(tracker, params_with(min_reads=3), formats, 0.5, known)
    assert detector.params.min_reads == 3 and detector.known is known
    ((later, _),) = _events(detector, _scene([("P567AM76", seed) for seed in range(12, 24)]))
    assert later.match == Match("staff", "O567AM76", 1, False, True)
    assert (later.text, later.voted_text) == ("O567AM76", "P567AM76")
