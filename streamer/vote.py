"""The text of one tracked plate, voted over its evidence.

Reads come in pieces of evidence (streamer/evidence.py): a read of a new image
starts one, a read of the same still image again joins the current one. Each
piece weighs as its best read (``text_score * det_score``), however many reads
it holds, and shares that weight among its texts in proportion to their reads'
weights. A car waiting ten seconds at a barrier is then one piece of evidence,
not fifty votes for whatever its still image happens to be misread as.

The vote first picks the string length with the most weight, then votes every
character position separately over the texts of that length: the consensus is
the winning character of each position, and its confidence the smallest share
a winning character had.

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

import math
from collections import defaultdict
from dataclasses import dataclass, field

from rapidfuzz.distance import Levenshtein

from streamer.plate_formats import PlateFormats

#: Pieces of evidence kept per track; beyond that the lightest one is dropped.
MAX_EVIDENCE = 200
#: Distinct texts kept per piece of evidence; beyond that the lightest one is dropped.
MAX_TEXTS_PER_EVIDENCE = 16
#: Distinct strings listed in ``VoteResult.candidates``.
CANDIDATES = 5


@dataclass(frozen=True, slots=True)
class VoteResult:
    """The outcome of a vote.

    ``confidence`` (0..1): for a consensus, the smallest per-position share
    of the winning character; for a fallback string, its share of the total
    weight. ``reads``: reads in the vote; ``evidence``: the pieces of evidence
    they make; ``support``: evidence for ``text``, each piece counting the share
    of its weight that reads within Levenshtein distance 1 of ``text`` have;
    ``exact``: reads equal to ``text``. ``candidates``: the heaviest distinct
    strings read, with their share of the total weight. ``first_t`` / ``last_t``:
    stream times of the first and the latest piece of evidence. ``tied``: the text won a
    tie somewhere (it was read first).
    """

    text: str
    confidence: float
    reads: int
    evidence: int
    support: float
    exact: int
    candidates: tuple[tuple[str, float], ...]
    valid: bool
    first_t: float
    last_t: float
    #: A position (or, for a fallback, the whole string) that two choices share equally.
    tied: bool = False

    def is_confident(self, confident_reads: int, confident_share: float) -> bool:
        """Valid, backed by ``confident_reads`` pieces of evidence, ``confident_share`` sure."""
        return (
            self.valid
            and self.support >= confident_reads - 1e-9
            and self.confidence >= confident_share
        )


@dataclass(slots=True)
class _Evidence:
    """The reads of one image: their summed weight and count per text."""

    t: float  # stream time of its first read
    weight: float = 0.0  # its best read's weight: what the piece weighs in the vote
    texts: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, text: str, weight: float) -> None:
        if text not in self.texts and len(self.texts) >= MAX_TEXTS_PER_EVIDENCE:
            lightest = min(self.texts, key=self.texts.__getitem__)
            if self.texts[lightest] >= weight:
                return
            del self.texts[lightest], self.counts[lightest]
        self.texts[text] = self.texts.get(text, 0.0) + weight
        self.counts[text] = self.counts.get(text, 0) + 1
        self.weight = max(self.weight, weight)

    def shares(self) -> list[tuple[str, float]]:
        """Each text with its share of this piece's reads' weight (sums to 1)."""
        total = sum(self.texts.values())
        if total <= 0.0:
            return [(text, 1.0 / len(self.texts)) for text in self.texts]
        return [(text, w / total) for text, w in self.texts.items()]


def _tied(weights: dict[str, float]) -> bool:
    """Whether the heaviest two of ``weights`` weigh the same (an earlier read wins the tie)."""
    top = sorted(weights.values(), reverse=True)[:2]
    return len(top) == 2 and math.isclose(top[0], top[1], rel_tol=1e-9, abs_tol=1e-12)


def _within_one(a: str, b: str) -> bool:
    return Levenshtein.distance(a, b, score_cutoff=1) <= 1


class PlateVote:
    """Accumulates the reads of one track and votes its text (see the module docstring)."""

    def __init__(
        self,
        formats: PlateFormats,
        min_text_score: float = 0.5,
        max_evidence: int = MAX_EVIDENCE,
    ) -> None:
        if not 0.0 <= min_text_score <= 1.0:
            raise ValueError(f"min_text_score must be in [0, 1], got {min_text_score}")
        if max_evidence < 1:
            raise ValueError(f"max_evidence must be >= 1, got {max_evidence}")
        self.formats = formats
        self.min_text_score = min_text_score
        self.max_evidence = max_evidence
        self._evidence: list[_Evidence] = []  # in arrival order
        self._reads = 0
        self._first_t: float | None = None
        self._result: VoteResult | None = None
        self._stale = False

    def __len__(self) -> int:
        """Reads in the vote."""
        return self._reads

    @property
    def evidence(self) -> int:
        """Pieces of evidence in the vote."""
        return len(self._evidence)

    def add(
        self, text: str, text_score: float, det_score: float, t: float, *, new: bool = True
    ) -> bool:
        """Add one read; ``new``: its image is new evidence (else it joins the latest piece).
        Returns whether it was kept (empty or low-score reads are not)."""
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
        if new or not self._evidence:
            if len(self._evidence) >= self.max_evidence:
                lightest = min(range(len(self._evidence)), key=lambda i: self._evidence[i].weight)
                del self._evidence[lightest]
            self._evidence.append(_Evidence(t))
        self._evidence[-1].add(text, text_score * det_score)
        self._reads += 1
        self._first_t = t if self._first_t is None else min(self._first_t, t)
        self._stale = True
        return True

    def result(self) -> VoteResult | None:
        """The vote so far, or None before the first kept read."""
        if not self._evidence:
            return None
        if self._stale or self._result is None:
            self._result = self._vote()
            self._stale = False
        return self._result

    def _vote(self) -> VoteResult:
        # (weight, text) per text of each piece, in arrival order: earlier wins ties.
        shares = [(e, e.shares()) for e in self._evidence]  # once: the weights and support
        parts = [(e.weight * share, text) for e, pairs in shares for text, share in pairs]
        total = sum(w for w, _ in parts) or 1.0

        by_length: dict[int, float] = defaultdict(float)
        by_text: dict[str, float] = defaultdict(float)
        for w, text in parts:
            by_length[len(text)] += w
            by_text[text] += w
        length = max(by_length, key=by_length.__getitem__)

        chars: list[str] = []
        confidence = 1.0
        tied = False
        same_length = [(w, text) for w, text in parts if len(text) == length]
        for i in range(length):
            votes: dict[str, float] = defaultdict(float)
            for w, text in same_length:
                votes[text[i]] += w
            winner = max(votes, key=votes.__getitem__)
            chars.append(winner)
            tied = tied or _tied(votes)
            position_total = sum(votes.values())
            share = votes[winner] / position_total if position_total > 0 else 0.0
            confidence = min(confidence, share)
        text = "".join(chars)

        valid = self.formats.is_valid(text)
        if not valid:
            valid_texts = {s: by_text[s] for s in by_text if self.formats.is_valid(s)}
            if valid_texts:
                text = max(valid_texts, key=valid_texts.__getitem__)
                confidence = by_text[text] / total
                tied = _tied(valid_texts)
                valid = True

        ranked = sorted(by_text, key=by_text.__getitem__, reverse=True)[:CANDIDATES]
        assert self._first_t is not None
        return VoteResult(
            text=text,
            confidence=confidence,
            reads=self._reads,
            evidence=len(self._evidence),
            support=sum(share for _, pairs in shares for s, share in pairs if _within_one(s, text)),
            exact=sum(e.counts.get(text, 0) for e in self._evidence),
            candidates=tuple((s, by_text[s] / total) for s in ranked),
            valid=valid,
            first_t=self._first_t,
            last_t=max(e.t for e in self._evidence),
            tied=tied,
        )
