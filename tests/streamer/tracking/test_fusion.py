import pytest

from streamer.domain.plate_formats import PlateFormats
from streamer.tracking import fusion

FORMATS = PlateFormats()


def _certain(text: str) -> list[fusion.Distribution]:
    return [{c: 1.0} for c in text]


def test_a_digit_position_takes_the_likeliest_digit() -> None:
    # The second position is B at 0.5, 8 at 0.4, 6 at 0.1: no format has a letter there.
    positions = [{"O": 1.0}, {"B": 0.5, "8": 0.4, "6": 0.1}, *_certain("67AM76")]
    decoded = fusion.decode(positions, FORMATS)
    assert (decoded.text, decoded.valid, decoded.tied) == ("O867AM76", True, False)
    assert decoded.confidence == pytest.approx(0.4 / (0.4 + 0.1))  # among the valid strings
    assert decoded.chars == pytest.approx((1, 0.4, 1, 1, 1, 1, 1, 1))


def test_o_and_0_both_fit_where_a_format_allows_either() -> None:
    # 0567AM76 is a valid motorcycle plate (four digits, two letters, region): the formats
    # cannot settle the first character, the probabilities do.
    positions = [{"0": 0.3, "O": 0.7}, *_certain("567AM76")]
    decoded = fusion.decode(positions, FORMATS)
    assert (decoded.text, decoded.confidence) == ("O567AM76", pytest.approx(0.7))


def test_two_equally_likely_valid_strings_are_a_tie() -> None:
    positions = [{"C": 0.5, "O": 0.5}, *_certain("567AM76")]
    decoded = fusion.decode(positions, FORMATS)
    assert decoded.tied and decoded.confidence == pytest.approx(0.5)


def test_nothing_valid_gives_an_invalid_result() -> None:
    decoded = fusion.decode(_certain("EO6HYO6"), FORMATS)
    assert (decoded.text, decoded.valid, decoded.confidence) == ("EO6HYO6", False, 0.0)
    assert not fusion.decode([], FORMATS).valid


def test_strings_not_looked_at_count_against_the_confidence() -> None:
    # Nine positions, each any of 22 characters: the decoder stops at MAX_CANDIDATES
    # strings, and what it did not see could be valid: the confidence stays low.
    uniform = {c: 1 / 22 for c in "0123456789ABEKMHOPCTYX"}
    decoded = fusion.decode([dict(uniform) for _ in range(9)], FORMATS, max_candidates=64)
    assert decoded.confidence < 0.01


@pytest.mark.parametrize(
    ("source", "target", "pairs"),
    [
        ("O567AM76", "O567AM76", [(i, i) for i in range(8)]),
        ("C567AM76", "O567AM76", [(i, i) for i in range(8)]),  # a replacement is shared
        ("Y836XH7", "Y836XH76", [(i, i) for i in range(7)]),  # the dropped 6 is not
        # The inserted 7 is left out, the characters around it shared.
        ("O5767AM76", "O567AM76", [(0, 0), (1, 1), (3, 2), (4, 3), (5, 4), (6, 5), (7, 6), (8, 7)]),
    ],
)
def test_aligned_positions(source: str, target: str, pairs: list[tuple[int, int]]) -> None:
    assert fusion.aligned_positions(source, target) == pairs


def test_a_read_without_probabilities_is_certain_of_its_text() -> None:
    assert fusion.rows_of("AB1", None) == [{"A": 1.0}, {"B": 1.0}, {"1": 1.0}]
    # Probabilities that do not fit the text (another length) are not trusted either.
    assert fusion.rows_of("AB", ((("A", 0.9),),)) == [{"A": 1.0}, {"B": 1.0}]
    probs = ((("A", 0.7), ("H", 0.3)), (("B", 1.0),))
    assert fusion.rows_of("AB", probs) == [{"A": 0.7, "H": 0.3}, {"B": 1.0}]


def test_rows_are_added_weighted_and_normalised() -> None:
    sums: list[fusion.Distribution] = [{}, {}]
    fusion.add_rows(sums, [{"A": 0.5, "H": 0.5}, {"1": 1.0}], 2.0)
    fusion.add_rows(sums, [{"A": 1.0}, {"7": 1.0}], 1.0)
    assert fusion.normalised(sums) == [
        pytest.approx({"A": 2 / 3, "H": 1 / 3}),
        pytest.approx({"1": 2 / 3, "7": 1 / 3}),
    ]
    assert fusion.best_text(sums) == "A1"


@pytest.mark.parametrize(
    ("times", "looks"),
    [
        ([], 1),
        ([5.0], 1),
        ([0.0, 0.2, 0.4, 0.6, 0.8], 1),  # within a second: one look, at any frame rate
        ([i / 30 for i in range(30)], 1),
        ([0.0, 0.5, 1.0, 1.5], 2),
        ([2.0, 0.0, 1.0], 3),  # order does not matter
        ([0.0, 0.9, 1.8], 2),  # 0.9 is too near 0.0, 1.8 is a second after it
        ([float(i) for i in range(60)], fusion.MAX_LOOKS),  # a minute is not sixty witnesses
    ],
)
def test_independent_looks_are_evidence_a_second_apart(times: list[float], looks: int) -> None:
    assert fusion.independent_looks(times) == looks


def test_sharpened_is_what_agreeing_independent_looks_give() -> None:
    rows = [{"8": 0.75, "3": 0.25}, {"6": 1.0}]
    assert fusion.sharpened(rows, 1) == rows
    assert fusion.sharpened(rows, 2) == [
        pytest.approx({"8": 0.9, "3": 0.1}),  # 0.5625 against 0.0625
        pytest.approx({"6": 1.0}),
    ]
    # The order of a position's characters never changes: only how sure it is.
    three = fusion.sharpened([{"C": 0.4, "O": 0.35, "H": 0.25}], 3)[0]
    assert sorted(three, key=three.__getitem__, reverse=True) == ["C", "O", "H"]
    assert three["C"] > 0.4
