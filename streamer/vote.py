"""The text of one tracked plate, voted over the reads of its frames.

Each read weighs ``text_score * det_score``. The vote first picks the string
length with the most weight, then votes every character position separately
over the reads of that length: the consensus is the winning character of each
position, and its confidence the smallest share a winning character had.

Why per position: a plate read over many frames is often misread in a
different place in each frame (``Y836XH7Y``, ``Y83CXO76``, ``YY36XH76``):
no two reads may agree, yet every position is right in most of them.
Frigate instead clusters whole reads by edit distance and keeps the heaviest
cluster's best string; that never invents a string nobody read, but it can
only return a read that was right as a whole. Per-position voting repairs such
reads; its cost is that reads with an inserted or dropped character are left
out (they sit in another length), and that a consensus can be a string that no
frame showed. The format check guards that: when the consensus is not a valid
plate, the heaviest valid string that was actually read is taken instead.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import defaultdict
from dataclasses import dataclass

from rapidfuzz.distance import Levenshtein

from streamer.plate_formats import PlateFormats

#: Reads kept per track; beyond that the lowest-weight read is dropped.
MAX_READS = 200
#: Distinct strings listed in ``VoteResult.candidates``.
CANDIDATES = 5


@dataclass(frozen=True, slots=True)
class VoteResult:
    """The outcome of a vote.

    ``confidence`` (0..1): for a consensus, the smallest per-position share
    of the winning character; for a fallback string, its share of the total
    weight. ``reads``: reads in the vote; ``support``: reads within
    Levenshtein distance 1 of ``text``; ``exact``: reads equal to it.
    ``candidates``: the heaviest distinct strings read, with their share of
    the total weight. ``first_t`` / ``last_t``: stream times of the first and
    latest accepted read.
    """

    text: str
    confidence: float
    reads: int
    support: int
    exact: int
    candidates: tuple[tuple[str, float], ...]
    valid: bool
    first_t: float
    last_t: float

    def is_confident(self, confident_reads: int, confident_share: float) -> bool:
        """Valid, supported by ``confident_reads`` reads and at least ``confident_share`` sure."""
        return self.valid and self.support >= confident_reads and self.confidence >= confident_share


def _within_one(a: str, b: str) -> bool:
    return Levenshtein.distance(a, b, score_cutoff=1) <= 1


class PlateVote:
    """Accumulates the reads of one track and votes its text (see the module docstring)."""

    def __init__(
        self,
        formats: PlateFormats,
        min_text_score: float = 0.5,
        max_reads: int = MAX_READS,
    ) -> None:
        if not 0.0 <= min_text_score <= 1.0:
            raise ValueError(f"min_text_score must be in [0, 1], got {min_text_score}")
        if max_reads < 1:
            raise ValueError(f"max_reads must be >= 1, got {max_reads}")
        self.formats = formats
        self.min_text_score = min_text_score
        self.max_reads = max_reads
        # Min-heap on weight, so the lightest read is the one dropped; seq keeps arrival order.
        self._reads: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._first_t: float | None = None
        self._last_t: float | None = None
        self._result: VoteResult | None = None
        self._stale = False

    def __len__(self) -> int:
        return len(self._reads)

    def add(self, text: str, text_score: float, det_score: float, t: float) -> bool:
        """Add one read; returns whether it was kept (empty or low-score reads are not)."""
        if not (math.isfinite(text_score) and math.isfinite(det_score) and math.isfinite(t)):
            raise ValueError(
                f"scores and time must be finite, got text_score={text_score}, "
                f"det_score={det_score}, t={t}"
            )
        if text_score < 0.0 or det_score < 0.0:
            raise ValueError(
                f"scores must be >= 0, got text_score={text_score}, det_score={det_score}"
            )
        if not text or text_score < self.min_text_score:
            return False
        read = (text_score * det_score, next(self._seq), text)
        if len(self._reads) < self.max_reads:
            heapq.heappush(self._reads, read)
        else:
            heapq.heappushpop(self._reads, read)
        self._first_t = t if self._first_t is None else min(self._first_t, t)
        self._last_t = t if self._last_t is None else max(self._last_t, t)
        self._stale = True
        return True

    def result(self) -> VoteResult | None:
        """The vote so far, or None before the first kept read."""
        if not self._reads:
            return None
        if self._stale or self._result is None:
            self._result = self._vote()
            self._stale = False
        return self._result

    def _vote(self) -> VoteResult:
        reads = sorted(self._reads, key=lambda r: r[1])  # arrival order: earlier wins ties
        total = sum(w for w, _, _ in reads) or 1.0

        by_length: dict[int, float] = defaultdict(float)
        by_text: dict[str, float] = defaultdict(float)
        for w, _, text in reads:
            by_length[len(text)] += w
            by_text[text] += w
        length = max(by_length, key=by_length.__getitem__)

        chars: list[str] = []
        confidence = 1.0
        same_length = [(w, text) for w, _, text in reads if len(text) == length]
        for i in range(length):
            votes: dict[str, float] = defaultdict(float)
            for w, text in same_length:
                votes[text[i]] += w
            winner = max(votes, key=votes.__getitem__)
            chars.append(winner)
            position_total = sum(votes.values())
            share = votes[winner] / position_total if position_total > 0 else 0.0
            confidence = min(confidence, share)
        text = "".join(chars)

        valid = self.formats.is_valid(text)
        if not valid:
            valid_texts = [s for s in by_text if self.formats.is_valid(s)]
            if valid_texts:
                text = max(valid_texts, key=by_text.__getitem__)
                confidence = by_text[text] / total
                valid = True

        ranked = sorted(by_text, key=by_text.__getitem__, reverse=True)[:CANDIDATES]
        assert self._first_t is not None and self._last_t is not None
        return VoteResult(
            text=text,
            confidence=confidence,
            reads=len(reads),
            support=sum(1 for _, _, s in reads if _within_one(s, text)),
            exact=sum(1 for _, _, s in reads if s == text),
            candidates=tuple((s, by_text[s] / total) for s in ranked),
            valid=valid,
            first_t=self._first_t,
            last_t=self._last_t,
        )
