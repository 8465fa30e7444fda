import pytest

from streamer.domain.plate_formats import PlateFormats
from streamer.tracking import fusion
from streamer.tracking.vote import PlateVote, VoteResult


def _vote(reads: list[tuple[str, float, float]], **kwargs: float) -> PlateVote:
    vote = PlateVote(PlateFormats(), **kwargs)  # type: ignore[arg-type]
    for i, (text, text_score, det_score) in enumerate(reads):
        vote.add(text, text_score, det_score, t=100.0 + i / 15)
    return vote


def _result(reads: list[tuple[str, float, float]], **kwargs: float) -> VoteResult:
    result = _vote(reads, **kwargs).result()
    assert result is not None
    return result


@pytest.mark.parametrize(
    ("texts", "exact", "support", "doubt"),
    [
        # Each read has at most one error, in a different place.
        (["Y836XH7Y", "Y83CXO76", "Y836XH76", "YY36XH76"], 1, 3, True),
        # No read is right as a whole.
        (["Y836XH7Y", "Y83CXH76", "YY36XH76", "Y836XO76"], 0, 4, True),
        # Misreads of another length are outvoted, not mixed in; O7CXHO7 shares too little
        # with the plate to be fused, and what is left has one valid reading only.
        (["Y836XH7Y", "Y836XH7", "Y83CXH76", "Y836XAH7O7", "YY36XH76", "O7CXHO7"], 0, 4, False),
    ],
)
def test_per_position_vote_repairs_reads(
    texts: list[str], exact: int, support: int, doubt: bool
) -> None:
    result = _result([(text, 0.9, 0.5) for text in texts])
    assert result.text == "Y836XH76"
    assert result.valid
    assert (result.exact, result.support, result.reads) == (exact, support, len(texts))
    assert 0.0 < result.confidence <= 1.0
    assert (result.confidence < 1.0) is doubt


def _confusable(text: str, p: float) -> tuple[tuple[tuple[str, float], ...], ...]:
    """Each character at ``p``, the rest of its mass on a confusable rival."""
    rival = {"8": "3", "3": "8", "6": "5", "7": "1", "Y": "V", "X": "K", "H": "M"}
    return tuple(((c, p), (rival.get(c, "0" if c.isalpha() else "O"), 1 - p)) for c in text)


def _plate_then_edge_on() -> PlateVote:
    """A plate read exactly in eight frames, then seen edge-on as it turns away: ten reads
    that share at most half of their characters with it."""
    edge_on = ["O71YY76", "O76YYO6", "O776CO76", "O77HHO76", "O76KO76", "A332HO76"] * 2
    vote = PlateVote(PlateFormats())
    for i in range(8):
        vote.add("Y836XH76", 0.95, 0.5, t=100.0 + i / 5, char_probs=_confusable("Y836XH76", 0.95))
    for i, text in enumerate(edge_on[:10]):
        vote.add(text, 0.9, 0.4, t=102.0 + i / 5, char_probs=_confusable(text, 0.9))
    return vote


def test_reads_of_something_else_do_not_dilute_the_plate(monkeypatch: pytest.MonkeyPatch) -> None:
    alone = PlateVote(PlateFormats())
    for i in range(8):
        alone.add("Y836XH76", 0.95, 0.5, t=100.0 + i / 5, char_probs=_confusable("Y836XH76", 0.95))
    plate = alone.result()
    result = _plate_then_edge_on().result()
    assert plate is not None and result is not None
    assert (result.text, result.exact, result.reads) == ("Y836XH76", 8, 18)
    # Set aside, the edge-on reads leave the plate the confidence its own reads give...
    assert result.one_look_confidence == pytest.approx(plate.one_look_confidence)
    assert result.confidence > 0.5  # (the default events.min_confidence)
    # ...and they are still what was read: listed among the candidates.
    assert "O71YY76" in dict(result.candidates)
    # Fused in (every read taken as of the plate), they would pull it under the threshold.
    monkeypatch.setattr("streamer.tracking.vote.SAME_PLATE_SIMILARITY", -1.0)
    diluted = _plate_then_edge_on().result()
    assert diluted is not None and diluted.text == "Y836XH76"
    assert diluted.one_look_confidence < 0.5 * plate.one_look_confidence


def test_a_plate_read_often_stays_the_reference_among_diverse_misreads() -> None:
    # The plate in three frames, eleven different misreads that agree with nothing: the
    # plate's neighbourhood weighs most, so it is what the reads are judged against.
    misreads = [
        "A1B2C3",
        "K77HOYO86",
        "OO0OO",
        "T4T4T4T",
        "M123MM",
        "XXX999",
        "B5",
        "E8E8E8E8E8",
        "P0P0",
        "H7777",
        "C98C",
    ]
    reads = [("Y836XH76", 0.9, 0.5)] * 3 + [(m, 0.9, 0.5) for m in misreads]
    result = _result(reads)
    assert (result.text, result.exact) == ("Y836XH76", 3)
    assert result.confidence == pytest.approx(1.0)


def test_a_character_no_format_allows_costs_no_confidence() -> None:
    # The last position reads 6 three times and Y once: a letter cannot end a plate.
    result = _result([("Y836XH76", 0.9, 0.5)] * 3 + [("Y836XH7Y", 0.9, 0.5)])
    assert (result.text, result.confidence) == ("Y836XH76", pytest.approx(1.0))
    assert result.candidates == (("Y836XH76", pytest.approx(0.75)), ("Y836XH7Y", 0.25))


def test_confidence_is_the_texts_probability_among_valid_plates() -> None:
    result = _result([("O567AM76", 0.9, 0.5)] * 3 + [("C567AM76", 0.9, 0.5)])
    assert (result.text, result.confidence) == ("O567AM76", pytest.approx(0.75))
    assert result.chars == pytest.approx((0.75, 1, 1, 1, 1, 1, 1, 1))


@pytest.mark.parametrize(
    ("c_reads", "o_reads", "expected"),
    [
        (17, 0, "C567AM76"),
        (17, 1, "C567AM76"),
        (17, 16, "C567AM76"),
        (17, 17, "C567AM76"),  # equal weight: the earlier read stays
        (17, 18, "O567AM76"),
        (17, 102, "O567AM76"),
        (5, 6, "O567AM76"),
    ],
)
def test_o_wins_over_c_once_it_has_more_weight(c_reads: int, o_reads: int, expected: str) -> None:
    # The clip's parked car: read C567AM76 first, then O567AM76 (its real plate).
    reads = [("C567AM76", 0.95, 0.67)] * c_reads + [("O567AM76", 0.95, 0.67)] * o_reads
    result = _result(reads)
    assert result.text == expected
    assert result.valid
    assert result.support == c_reads + o_reads  # the two are one edit apart
    assert result.exact == (c_reads if expected == "C567AM76" else o_reads)
    # The mean's figure for one look; reads a second apart are more looks, agreeing more.
    share = max(c_reads, o_reads) / (c_reads + o_reads)
    looks = fusion.independent_looks(100.0 + i / 15 for i in range(c_reads + o_reads))
    assert result.one_look_confidence == pytest.approx(share)
    assert result.confidence == pytest.approx(share**looks / (share**looks + (1 - share) ** looks))


def test_weight_not_count_decides() -> None:
    # Three faint C reads against two clear O reads.
    reads = [("C567AM76", 0.55, 0.3)] * 3 + [("O567AM76", 0.97, 0.7)] * 2
    assert _result(reads).text == "O567AM76"


@pytest.mark.parametrize(
    "texts",
    [
        ["EO6HYO6"],
        ["EO6HYO6", "E06HYO6", "EO6HY06"],
        ["Y846XYY6", "YY35XHE7", "Y83KKXH7"],
    ],
)
def test_invalid_reads_only_give_an_invalid_result(texts: list[str]) -> None:
    result = _result([(text, 0.9, 0.5) for text in texts])
    assert not result.valid
    assert not result.is_confident(1, 0.0)


def test_the_formats_repair_a_digit_read_as_a_letter() -> None:
    # Position 1 reads Y twice and 8 once; a letter cannot stand there, so it is the 8.
    reads = [("YY36XH76", 0.9, 0.5), ("YY36XH76", 0.9, 0.5), ("Y836XH76", 0.9, 0.5)]
    result = _result(reads)
    assert (result.text, result.valid) == ("Y836XH76", True)
    assert result.confidence == pytest.approx(1.0)
    assert (result.exact, result.support) == (1, 3)


def test_the_heaviest_length_is_voted() -> None:
    reads = [("B840CK197", 0.9, 0.6)] * 3 + [("B840CK19", 0.9, 0.5)] * 2
    result = _result(reads)
    assert (result.text, result.exact, result.support) == ("B840CK197", 3, 5)


def test_an_invalid_heaviest_length_still_counts_for_the_positions_it_shares() -> None:
    # Y836XH7 (weight 3 x 0.57) wins the length vote, but no format has its length: the
    # plate is Y836XH76, and the short reads back its first seven characters.
    reads = [("Y836XH7", 0.95, 0.6)] * 3 + [("Y836XH76", 0.9, 0.5)] * 2
    result = _result(reads)
    assert (result.text, result.valid, result.exact) == ("Y836XH76", True, 2)
    assert result.confidence == pytest.approx(1.0)
    # Short reads that disagree at a shared position outweigh the full ones there.
    reads = [("C836XH7", 0.95, 0.6)] * 3 + [("Y836XH76", 0.9, 0.5)] * 2
    result = _result(reads)
    assert result.text == "C836XH76"
    assert result.chars[0] == pytest.approx(3 * 0.95 * 0.6 / (3 * 0.95 * 0.6 + 2 * 0.9 * 0.5))


@pytest.mark.parametrize(
    ("text", "text_score", "kept"),
    [("O567AM76", 0.5, True), ("O567AM76", 0.49, False), ("", 0.99, False)],
)
def test_low_score_and_empty_reads_are_ignored(text: str, text_score: float, kept: bool) -> None:
    vote = PlateVote(PlateFormats(), min_text_score=0.5)
    assert vote.add(text, text_score, 0.6, t=1.0) is kept
    assert (vote.result() is not None) is kept
    assert len(vote) == int(kept)


def test_no_reads_no_result() -> None:
    assert PlateVote(PlateFormats()).result() is None


def test_memory_is_bounded_by_dropping_the_lightest_evidence() -> None:
    vote = PlateVote(PlateFormats(), max_evidence=5)
    for i in range(5):
        vote.add("C567AM76", 0.6, 0.3, t=float(i))  # light
    for i in range(5, 10):
        vote.add("O567AM76", 0.95, 0.7, t=float(i))  # heavy
    assert vote.evidence == 5 and len(vote) == 10
    result = vote.result()
    assert result is not None
    assert (result.text, result.evidence, result.exact, result.confidence) == (
        "O567AM76",
        5,
        5,
        1.0,
    )
    assert (result.first_t, result.last_t) == (0.0, 9.0)


def test_a_still_image_read_again_is_one_piece_of_evidence() -> None:
    # A car waits: its still image is misread 60 times; then it moves, three new images.
    vote = PlateVote(PlateFormats())
    vote.add("C567AM76", 0.95, 0.7, t=0.0)
    for i in range(1, 60):
        vote.add("C567AM76", 0.95, 0.7, t=i / 5, new=False)
    for i in range(3):
        vote.add("O567AM76", 0.9, 0.7, t=12.0 + i / 5)
    result = vote.result()
    assert result is not None
    assert (result.text, result.reads, result.evidence, result.exact) == ("O567AM76", 63, 4, 3)
    assert result.support == pytest.approx(4.0)  # C567AM76 is one edit away
    # The span of evidence: from the still image to the latest new one, not to the last read.
    assert (result.first_t, result.last_t) == (0.0, 12.4)


def test_a_piece_of_evidence_shares_its_weight_among_its_reads() -> None:
    # One still image read 3 times as C567AM76 and once as O567AM76, then one new O567AM76.
    vote = PlateVote(PlateFormats())
    vote.add("C567AM76", 0.9, 0.5, t=0.0)
    for text in ("C567AM76", "C567AM76", "O567AM76"):
        vote.add(text, 0.9, 0.5, t=0.2, new=False)
    vote.add("O567AM76", 0.9, 0.5, t=0.4)
    result = vote.result()
    assert result is not None
    # O567AM76: 1/4 of the first piece + all of the second = 1.25 of 2.
    assert result.text == "O567AM76"
    assert dict(result.candidates) == pytest.approx({"O567AM76": 0.625, "C567AM76": 0.375})
    assert result.confidence == pytest.approx(0.625)


def test_candidates_are_the_top_five_by_weight() -> None:
    texts = ["A111AA11", "B222BB22", "B222BB22", "C333CC33", "E444EE44", "H555HH55", "K666KK66"]
    result = _result([(text, 0.9, 0.5) for text in texts])
    assert [text for text, _ in result.candidates] == [
        "B222BB22",
        "A111AA11",
        "C333CC33",
        "E444EE44",
        "H555HH55",
    ]
    assert result.candidates[0][1] == pytest.approx(2 / 7)


def test_result_follows_new_reads() -> None:
    vote = PlateVote(PlateFormats())
    vote.add("C567AM76", 0.95, 0.67, t=0.0)
    first = vote.result()
    assert first is not None and first.text == "C567AM76"
    assert vote.result() is first  # cached while nothing changes
    vote.add("O567AM76", 0.95, 0.67, t=0.1)
    vote.add("O567AM76", 0.95, 0.67, t=0.2)
    second = vote.result()
    assert second is not None and second.text == "O567AM76"


@pytest.mark.parametrize(
    ("reads", "confident_reads", "confident_share", "expected"),
    [
        ([("O567AM76", 0.95, 0.67)] * 10, 10, 0.8, True),
        ([("O567AM76", 0.95, 0.67)] * 9, 10, 0.8, False),
        ([("O567AM76", 0.95, 0.67)] * 8 + [("C567AM76", 0.95, 0.67)] * 2, 10, 0.8, True),
        ([("O567AM76", 0.95, 0.67)] * 7 + [("C567AM76", 0.95, 0.67)] * 3, 10, 0.8, False),
        ([("EO6HYO6", 0.95, 0.67)] * 20, 10, 0.8, False),
    ],
)
def test_is_confident(
    reads: list[tuple[str, float, float]],
    confident_reads: int,
    confident_share: float,
    expected: bool,
) -> None:
    assert _result(reads).is_confident(confident_reads, confident_share) is expected


@pytest.mark.parametrize(
    ("text_score", "det_score"), [(float("nan"), 0.5), (0.9, float("inf")), (-0.1, 0.5)]
)
def test_bad_scores_are_refused(text_score: float, det_score: float) -> None:
    with pytest.raises(ValueError, match="scores"):
        PlateVote(PlateFormats()).add("O567AM76", text_score, det_score, t=0.0)


def test_a_tie_is_marked_and_a_plurality_is_not() -> None:
    tie = PlateVote(PlateFormats())
    tie.add("C567AM76", 0.9, 0.5, t=0.0)
    tie.add("O567AM76", 0.9, 0.5, t=1.0)
    result = tie.result()
    assert result is not None and (result.text, result.tied) == ("C567AM76", True)
    # Three readings of the first letter, none with half the weight: no tie, a winner.
    plurality = PlateVote(PlateFormats())
    for text, score in (("O567AM76", 0.95), ("C567AM76", 0.7), ("M567AM76", 0.7)):
        plurality.add(text, score, 0.5, t=0.0)
    result = plurality.result()
    assert result is not None and (result.text, result.tied) == ("O567AM76", False)
    assert result.confidence < 0.5


def _probs(text: str, **doubts: dict[str, float]) -> tuple[tuple[tuple[str, float], ...], ...]:
    """Per-character probabilities of ``text``: certain, except the positions named
    ``p<index>`` (``p0={"C": 0.45, "O": 0.4, "H": 0.15}``)."""
    rows = []
    for i, c in enumerate(text):
        row = doubts.get(f"p{i}", {c: 1.0})
        rows.append(tuple(sorted(row.items(), key=lambda kv: -kv[1])))
    return tuple(rows)


def test_the_fused_probabilities_decide_not_the_best_paths() -> None:
    # Three images whose best path is C567AM76, each barely (C 0.45, O 0.40), and two that
    # read O567AM76 clearly: by text, C wins 3 to 2; by what the network saw, O does.
    vote = PlateVote(PlateFormats())
    unsure = _probs("C567AM76", p0={"C": 0.45, "O": 0.40, "H": 0.15})
    sure = _probs("O567AM76", p0={"O": 0.9, "C": 0.1})
    for i in range(3):
        vote.add("C567AM76", 0.9, 0.5, t=float(i), char_probs=unsure)
    for i in range(3, 5):
        vote.add("O567AM76", 0.9, 0.5, t=float(i), char_probs=sure)
    result = vote.result()
    assert result is not None
    assert result.text == "O567AM76"
    assert result.chars[0] == pytest.approx((3 * 0.40 + 2 * 0.9) / 5)
    # O 0.60 of O + C + H, all valid, on one look; five reads a second apart are three.
    assert result.one_look_confidence == pytest.approx(0.6)
    assert result.confidence == pytest.approx(0.6**3 / (0.6**3 + 0.31**3 + 0.09**3))
    assert result.exact == 2  # min_reads still counts reads equal to the text


def test_a_digit_position_takes_the_likeliest_digit() -> None:
    # The network's best path has a B where a digit must be; its second choice is 8.
    vote = PlateVote(PlateFormats())
    probs = _probs("O5B7AM76", p2={"B": 0.6, "8": 0.3, "6": 0.1})
    vote.add("O5B7AM76", 0.9, 0.5, t=0.0, char_probs=probs)
    result = vote.result()
    assert result is not None
    assert (result.text, result.valid) == ("O587AM76", True)
    assert result.confidence == pytest.approx(0.3 / 0.4)  # 8 against 6, the valid rivals


def test_reads_of_another_length_add_to_the_positions_they_share() -> None:
    # Two 8-character reads cannot tell C from O; a 9-character read with an inserted 7
    # (O5767AM76) sees an O clearly, and its first position counts.
    vote = PlateVote(PlateFormats())
    tie = _probs("C567AM76", p0={"C": 0.5, "O": 0.5})
    vote.add("C567AM76", 0.9, 0.5, t=0.0, char_probs=tie)
    vote.add("C567AM76", 0.9, 0.5, t=1.0, char_probs=tie)
    vote.add("O5767AM76", 0.9, 0.5, t=2.0, char_probs=_probs("O5767AM76", p0={"O": 0.9, "C": 0.1}))
    result = vote.result()
    assert result is not None
    assert result.text == "O567AM76"
    assert result.chars[0] == pytest.approx((0.5 + 0.5 + 0.9) / 3)


def _eight_against_three(times: list[float]) -> VoteResult:
    """Eleven reads of the silver car: eight see its 8, three a 3 (the second character)."""
    vote = PlateVote(PlateFormats())
    for i, t in enumerate(times):
        text = "Y336XH76" if i % 4 == 3 else "Y836XH76"
        vote.add(text, 0.9, 0.5, t=t, char_probs=_confusable(text, 0.97))
    result = vote.result()
    assert result is not None
    return result


def test_reads_spread_over_seconds_are_more_sure_than_the_same_reads_in_one() -> None:
    burst = _eight_against_three([100.0 + i / 15 for i in range(11)])  # 0.7 s: one look
    passing = _eight_against_three([100.0 + i / 5 for i in range(11)])  # 2 s: three looks
    assert burst.text == passing.text == "Y836XH76"
    assert burst.confidence == pytest.approx(burst.one_look_confidence)
    assert passing.one_look_confidence == pytest.approx(burst.one_look_confidence)
    assert burst.confidence < 0.8 < passing.confidence
    # An early report asks for its share on one look: looks never make it sooner.
    assert not passing.is_confident(1, 0.8)


def test_a_still_image_read_for_a_minute_is_one_look() -> None:
    vote = PlateVote(PlateFormats())
    vote.add("C567AM76", 0.9, 0.5, t=0.0)
    for i in range(1, 300):
        text = "O567AM76" if i % 3 == 0 else "C567AM76"
        vote.add(text, 0.9, 0.5, t=i / 5, new=False)
    result = vote.result()
    assert result is not None and result.evidence == 1
    assert result.confidence == pytest.approx(result.one_look_confidence)
    assert result.confidence == pytest.approx(2 / 3, abs=0.01)
