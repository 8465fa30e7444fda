"""Character-level fusion: a track's text from its reads' character probabilities.

Each read gives, per character, what that character could be (the BLS model's
CTC-aligned probabilities, ``PlateReading.char_probs``: ``O`` 0.6, ``C`` 0.3, ...).
A track's reads are fused position by position: each position's distribution
is the weighted mean of its reads' distributions for it (streamer/tracking/vote.py says
what weighs how much). A read of another length than the track's text still
counts for the positions it shares with it: it is aligned to the text by
Levenshtein edit operations, and its characters that are kept or replaced
(not inserted or deleted) add to the positions they align with.

Why the mean and not the product: the reads of one vehicle are not independent
(the same pose, light and blur misread the same way frame after frame), and a
product would make twenty reads of one doubt look like certainty. The mean
keeps the doubt: a ``C`` read at 0.45 in every frame stays 0.45.

The text is then decoded under the plate formats: the most probable string,
position by position, that a format accepts (a letter position cannot take a
digit, so ``0`` at 0.5 and ``O`` at 0.4 in a letter position give ``O``). The
formats are regular expressions, so the decoder enumerates strings best first
(a k-best search over the positions' sorted choices, until the strings seen
hold ``ENOUGH_MASS`` of the probability, what is left could not move the
confidence by more than ``CLOSE_ENOUGH``, or ``MAX_CANDIDATES`` were seen) and
takes the first valid one. Its ``confidence`` is its probability among the valid
strings, ``P(text) / (P(valid strings seen) + P(strings not enumerated))``:
every string it did not look at counts as a valid rival, so the figure never
overstates.

The mean keeps a doubt, but it also ignores that the doubt was looked at again: eight
reads of 8 against three of 3 in one position, spread over a second and a half of a
passing car, are worth more than one read at 8:3. Reads further apart in stream time than
``DECORRELATION_S`` are seen in another pose, light and blur, and their errors are no
longer the same error; :func:`independent_looks` counts the pieces of evidence that far
apart (at most ``MAX_LOOKS``), and the confidence is computed on the fused distributions
raised to that power and normalised (:func:`sharpened`: what that many independent reads,
each with the mean's doubt, would give). The text is always the one the mean decodes; only
its confidence counts the looks. A still image stands for one look however long it
stands, and frames within one second are one look at any frame rate. docs/ACCURACY.md
measures how well the confidence is calibrated on the labelled set.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rapidfuzz.distance import Levenshtein

from streamer.domain.frames import CharProbs
from streamer.domain.plate_formats import PlateFormats

#: One position: character -> probability.
Distribution = dict[str, float]

#: Strings the decoder looks at, best first, before it gives up on finding a valid one.
MAX_CANDIDATES = 64
#: The decoder stops once the strings it looked at hold this much probability...
ENOUGH_MASS = 0.999
#: ...or once what it has not looked at is under this fraction of the best valid string's.
CLOSE_ENOUGH = 0.01
#: Seconds of stream time after which a vehicle's reads are independent looks at its plate
#: (another pose, light and blur); nearer reads repeat each other's misreads.
DECORRELATION_S = 1.0
#: Independent looks credited at most: a car waiting at a barrier is seen in the same light
#: for a minute, and its reads never become sixty independent witnesses.
MAX_LOOKS = 3


def rows_of(text: str, char_probs: CharProbs | None) -> list[Distribution]:
    """A read's per-position distributions; without probabilities each character is certain."""
    if char_probs is None or len(char_probs) != len(text):
        return [{c: 1.0} for c in text]
    rows = []
    for c, pairs in zip(text, char_probs, strict=True):
        row = {ch: p for ch, p in pairs if p > 0.0}
        rows.append(row or {c: 1.0})
    return rows


def add_row(total: Distribution, row: Distribution, weight: float) -> None:
    """``total += weight * row`` for one position."""
    for c, p in row.items():
        total[c] = total.get(c, 0.0) + weight * p


def add_rows(sums: list[Distribution], rows: Sequence[Distribution], weight: float) -> None:
    """``sums[i] += weight * rows[i]`` for every position (the same length)."""
    for total, row in zip(sums, rows, strict=True):
        add_row(total, row, weight)


def best_text(rows: Iterable[Distribution]) -> str:
    """The most likely character of each position (earlier-listed wins a tie)."""
    return "".join(max(row, key=row.__getitem__) if row else "?" for row in rows)


def aligned_positions(source: str, target: str) -> list[tuple[int, int]]:
    """(source index, target index) of the characters ``source`` shares with ``target``:
    those kept or replaced by the edit operations from one to the other."""
    pairs = []
    for tag, s1, s2, t1, t2 in Levenshtein.opcodes(source, target):
        if tag in ("equal", "replace") and s2 - s1 == t2 - t1:
            pairs.extend(zip(range(s1, s2), range(t1, t2), strict=True))
    return pairs


def normalised(sums: Sequence[Distribution]) -> list[Distribution]:
    out = []
    for row in sums:
        total = sum(row.values())
        out.append({c: p / total for c, p in row.items()} if total > 0 else {})
    return out


def independent_looks(times: Iterable[float]) -> int:
    """How many independent looks pieces of evidence at stream ``times`` are: those at
    least ``DECORRELATION_S`` after the previous one counted, from the first, at most
    ``MAX_LOOKS`` (at least 1)."""
    looks, last = 0, -math.inf
    for t in sorted(times):
        if t - last >= DECORRELATION_S:
            looks, last = looks + 1, t
    return max(1, min(looks, MAX_LOOKS))


def sharpened(positions: Sequence[Distribution], looks: int) -> list[Distribution]:
    """Each position's distribution raised to the power ``looks`` and normalised: what
    ``looks`` independent reads, each as doubtful as the distribution, agree on."""
    if looks <= 1:
        return [dict(row) for row in positions]
    return normalised([{c: p**looks for c, p in row.items()} for row in positions])


@dataclass(frozen=True, slots=True)
class Decoded:
    """The best valid string of some fused positions (``valid`` False: none found, ``text``
    is then the unconstrained best). ``confidence``: its probability among the valid
    strings; ``tied``: the next valid string is as probable; ``chars``: per position, the
    probability of its character."""

    text: str
    confidence: float
    valid: bool
    tied: bool
    chars: tuple[float, ...] = ()
    #: Set by the vote when ``confidence`` counts independent looks: the one-look figure.
    one_look: float | None = None


def decode(
    positions: Sequence[Distribution],
    formats: PlateFormats,
    max_candidates: int = MAX_CANDIDATES,
) -> Decoded:
    """The most probable string of ``positions`` that ``formats`` accept (see the module
    docstring). ``positions`` must be normalised (each sums to 1)."""
    # Per position: (character, log probability), likeliest first.
    choices = [
        [(c, math.log(max(p, 1e-300))) for c, p in sorted(row.items(), key=lambda kv: -kv[1])]
        for row in positions
    ]
    if not choices or any(not c for c in choices):
        return Decoded(best_text(positions), 0.0, False, False)

    start = (0,) * len(choices)
    # Best first: (-log P, index per position, first position that may still change).
    heap: list[tuple[float, tuple[int, ...], int]] = [(-sum(c[0][1] for c in choices), start, 0)]
    seen_mass = 0.0
    valid: list[tuple[str, float]] = []
    for _ in range(max_candidates):
        if not heap or seen_mass >= ENOUGH_MASS:
            break
        if valid and 1.0 - seen_mass <= CLOSE_ENOUGH * valid[0][1]:
            break  # what is left could change the confidence by under 1 %
        neg, index, first = heapq.heappop(heap)
        p = math.exp(-neg)
        seen_mass += p
        text = "".join(choices[i][k][0] for i, k in enumerate(index))
        if formats.is_valid(text):
            valid.append((text, p))
        # Successors change one position at or after ``first``: each string is made once.
        for i in range(first, len(index)):
            k = index[i]
            if k + 1 < len(choices[i]):
                nxt = (*index[:i], k + 1, *index[i + 1 :])
                heapq.heappush(heap, (neg + choices[i][k][1] - choices[i][k + 1][1], nxt, i))
    if not valid:
        return Decoded(best_text(positions), 0.0, False, False)
    text, p = valid[0]
    # Every string not looked at counts as a valid rival: the confidence never overstates.
    unseen = max(0.0, 1.0 - seen_mass)
    confidence = p / (sum(q for _, q in valid) + unseen) if p > 0 else 0.0
    tied = len(valid) > 1 and math.isclose(p, valid[1][1], rel_tol=1e-9)
    chars = tuple(row.get(c, 0.0) for row, c in zip(positions, text, strict=True))
    return Decoded(text, min(1.0, confidence), True, tied, chars)
