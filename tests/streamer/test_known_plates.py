import pytest

from streamer.known_plates import KnownList, KnownPlates, Match


def test_a_plate_within_the_distance_matches() -> None:
    known = KnownPlates([KnownList("staff", ("O567AM76", "A123BC77"), max_distance=2)])
    assert known.match("C567AC76") == Match("staff", "O567AM76", 2, False, False)
    assert known.match("A123BC77") == Match("staff", "A123BC77", 0, False, False)
    assert known.match("Y836XH76") is None  # 6 edits away


def test_the_closest_match_wins_then_the_first_list() -> None:
    known = KnownPlates(
        [
            KnownList("visitors", ("O567AM77",), max_distance=1),
            KnownList("staff", ("O567AM76",), max_distance=1, snap=True),
            KnownList("fleet", ("O567AM76",), max_distance=1),
        ]
    )
    assert known.match("O567AM76") == Match("staff", "O567AM76", 0, False, True)
    assert known.match("O567AM7") == Match("visitors", "O567AM77", 1, False, False)


def test_a_pattern_matches_whole_at_distance_zero_and_never_snaps() -> None:
    known = KnownPlates(
        [KnownList("stolen", (r"X\d{3}..77",), max_distance=2, snap=True, alert=True)]
    )
    assert known.match("X123AB77") == Match("stolen", r"X\d{3}..77", 0, True, False)
    assert known.match("X123AB777") is None


def test_no_lists_match_nothing() -> None:
    assert not KnownPlates() and KnownPlates().match("O567AM76") is None


def test_a_negative_distance_is_refused() -> None:
    with pytest.raises(ValueError, match="max_distance"):
        KnownList("x", ("A",), max_distance=-1)


def test_match_to_dict_is_what_events_carry() -> None:
    match = Match("staff", "O567AM76", 1, True, True)
    assert match.to_dict() == {"label": "staff", "plate": "O567AM76", "distance": 1}
