"""The text of one tracked plate, voted over its evidence.

Reads come in pieces of evidence (streamer/tracking/evidence.py): a read of a new image
starts one, a read of the same still image again joins the current one. Each
piece weighs as its best read (``text_score * det_score``), however many reads
it holds, and shares that weight among its texts in proportion to their reads'
weights. A car waiting ten seconds at a barrier is then one piece of evidence,
not fifty votes for whatever its still image happens to be misread as.

The text is fused at the character level (streamer/tracking/fusion.py): each position's
distribution is the weighted mean of the reads' character probabilities (the
BLS model's, CTC-aligned), reads of the track's string length position by
position and reads of other lengths aligned to it by edit operations; the text
is the most probable string of those positions that a plate format accepts,
and its confidence is that string's probability among the valid ones, counting
the independent looks its evidence spans (pieces at least a second apart).

The string length is chosen first: the length with the most weight whose fused
positions give a valid plate (a ``Y836XH7`` with its last digit dropped is
evidence for the first seven positions of ``Y836XH76``, not a plate of its
own).

Before that, the reads that are not of the track's plate are set aside: a read
that does not share most of its characters with the track's reference text
(normalised Levenshtein similarity not above ``SAME_PLATE_SIMILARITY``: half of
them or more edited) is a plate seen edge-on, a sticker or another object
matched into the track, not a doubt about this plate's characters; fused in,
ten such reads would turn eight exact reads into a confidence of 0.1. The
reference is the text read whose neighbourhood (the reads more similar to it
than that) weighs most, as Frigate
clusters reads: garbage rarely agrees with itself, so a plate read exactly in a
few frames is the reference even among many misreads. Set-aside reads still
count in ``reads``, ``support`` and ``candidates``; when no read is near
another, all of them are fused.

Why per position: a plate read over many frames is often misread in a
different place in each frame (``Y836XH7Y``, ``Y83CXO76``, ``YY36XH76``):
no two reads may agree, yet every position is right in most of them.
Frigate instead clusters whole reads by edit distance and keeps the heaviest
cluster's best string; that never invents a string nobody read, but it can
only return a read that was right as a whole. Fusion repairs such reads; its
cost is that the result can be a string that no frame showed, which is why a
pass is only reported when enough reads equal it (``events.min_reads``).
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass, field

from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from streamer.domain.frames import CharProbs
from streamer.domain.plate_formats import PlateFormats
from streamer.tracking import fusion

#: Pieces of evidence kept per track; beyond that the lightest one is dropped.
MAX_EVIDENCE = 200
#: Distinct texts kept per piece of evidence; beyond that the lightest one is dropped.
MAX_TEXTS_PER_EVIDENCE = 16
#: Distinct strings listed in ``VoteResult.candidates``.
CANDIDATES = 5
#: String lengths tried, heaviest first, for a valid fused text.
LENGTHS_TRIED = 3
#: Reads no more similar than this to the reference text (normalised Levenshtein
#: similarity: half of the characters or more edited) are not fused (module docstring).
SAME_PLATE_SIMILARITY = 0.5


@dataclass(frozen=True, slots=True)
class VoteResult:
    """The outcome of a vote.

    ``confidence`` (0..1): the probability of ``text`` among the valid plates,
    from the fused character probabilities and the independent looks at them
    (streamer/tracking/fusion.py). ``reads``: reads
    in the vote; ``evidence``: the pieces of evidence they make; ``support``:
    evidence for ``text``, each piece counting the share of its weight that reads
    within Levenshtein distance 1 of ``text`` have;
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
    #: The next valid string is as probable as ``text``.
    tied: bool = False
    #: Per character of ``text``, its fused probability.
    chars: tuple[float, ...] = ()
    #: The confidence one look gives (the mean's, not counting independent looks:
    #: fusion.py); what an early report needs, so that repeated misreads of a slow car
    #: never make it sooner. None: as ``confidence``.
    one_look: float | None = None

    @property
    def one_look_confidence(self) -> float:
        return self.confidence if self.one_look is None else self.one_look

    def is_confident(self, confident_reads: int, confident_share: float) -> bool:
        """Valid, backed by ``confident_reads`` pieces of evidence, ``confident_share`` sure
        on one look."""
        return (
            self.valid
            and self.support >= confident_reads - 1e-9
            and self.one_look_confidence >= confident_share
        )


@dataclass(slots=True)
class _Evidence:
    """The reads of one image: their summed weight and count per text, and per text the
    weighted sum of their character probabilities."""

    t: float  # stream time of its first read
    weight: float = 0.0  # its best read's weight: what the piece weighs in the vote
    texts: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    #: text -> (summed weight, per position: character -> summed weight * probability)
    rows: dict[str, tuple[float, list[fusion.Distribution]]] = field(default_factory=dict)

    def add(self, text: str, weight: float, char_probs: CharProbs | None) -> None:
        if text not in self.texts and len(self.texts) >= MAX_TEXTS_PER_EVIDENCE:
            lightest = min(self.texts, key=self.texts.__getitem__)
            if self.texts[lightest] >= weight:
                return
            del self.texts[lightest], self.counts[lightest], self.rows[lightest]
        self.texts[text] = self.texts.get(text, 0.0) + weight
        self.counts[text] = self.counts.get(text, 0) + 1
        self.weight = max(self.weight, weight)
        total, sums = self.rows.get(text, (0.0, [{} for _ in text]))
        fusion.add_rows(sums, fusion.rows_of(text, char_probs), max(weight, 1e-9))
        self.rows[text] = (total + max(weight, 1e-9), sums)

    def shares(self) -> list[tuple[str, float]]:
        """Each text with its share of this piece's reads' weight (sums to 1)."""
        total = sum(self.texts.values())
        if total <= 0.0:
            return [(text, 1.0 / len(self.texts)) for text in self.texts]
        return [(text, w / total) for text, w in self.texts.items()]

    def text_rows(
        self, kept: set[str] | None
    ) -> list[tuple[float, int, list[fusion.Distribution]]]:
        """Per text in ``kept`` (None: every text): its share of this piece's weight, its
        length and the mean probabilities of its reads. The texts of one image that are
        the same length are summed first: one image, one distribution per length."""
        total = sum(w for w, _ in self.rows.values()) or 1.0
        by_length: dict[int, tuple[float, list[fusion.Distribution]]] = {}
        for text, (w, sums) in self.rows.items():
            if kept is not None and text not in kept:
                continue
            acc_w, acc = by_length.get(len(text), (0.0, [{} for _ in text]))
            for into, row in zip(acc, sums, strict=True):
                fusion.add_row(into, row, 1.0)
            by_length[len(text)] = (acc_w + w, acc)
        return [
            (self.weight * w / total, length, fusion.normalised(sums))
            for length, (w, sums) in by_length.items()
        ]


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
        self,
        text: str,
        text_score: float,
        det_score: float,
        t: float,
        *,
        new: bool = True,
        char_probs: CharProbs | None = None,
    ) -> bool:
        """Add one read; ``new``: its image is new evidence (else it joins the latest piece);
        ``char_probs``: its character probabilities (None: each character is certain).
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
        self._evidence[-1].add(text, text_score * det_score, char_probs)
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
        by_text: dict[str, float] = defaultdict(float)
        for w, text in parts:
            by_text[text] += w

        # (weight, length, mean probabilities) per length of each piece, its plate's reads only.
        counts: dict[str, int] = defaultdict(int)
        for e in self._evidence:
            for text, n in e.counts.items():
                counts[text] += n
        kept = self._same_plate(by_text, counts)
        per_piece = [(e.t, e.text_rows(kept)) for e in self._evidence]
        rows = [row for _, piece in per_piece for row in piece]
        looks = fusion.independent_looks(t for t, piece in per_piece if piece)
        by_length: dict[int, float] = defaultdict(float)
        for w, length, _ in rows:
            by_length[length] += w
        lengths = sorted(by_length, key=by_length.__getitem__, reverse=True)[:LENGTHS_TRIED]
        decoded = None
        for length in lengths:
            attempt = self._fuse(rows, length, looks)
            if decoded is None or (attempt.valid and not decoded.valid):
                decoded = attempt
            if attempt.valid:
                break
        assert decoded is not None
        text = decoded.text

        ranked = sorted(by_text, key=by_text.__getitem__, reverse=True)[:CANDIDATES]
        assert self._first_t is not None
        return VoteResult(
            text=text,
            confidence=decoded.confidence,
            one_look=decoded.one_look,
            reads=self._reads,
            evidence=len(self._evidence),
            support=sum(share for _, pairs in shares for s, share in pairs if _within_one(s, text)),
            exact=sum(e.counts.get(text, 0) for e in self._evidence),
            candidates=tuple((s, by_text[s] / total) for s in ranked),
            valid=decoded.valid,
            first_t=self._first_t,
            last_t=max(e.t for e in self._evidence),
            tied=decoded.tied,
            chars=decoded.chars,
        )

    @staticmethod
    def _same_plate(by_text: dict[str, float], counts: dict[str, int]) -> set[str] | None:
        """The texts read of the track's plate: those more than ``SAME_PLATE_SIMILARITY``
        similar to the reference (the text whose such neighbours weigh most; earlier read
        wins a tie). None: keep every text (one text, or no two reads near each other)."""
        if len(by_text) < 2:
            return None
        texts = list(by_text)
        near = (
            process.cdist(texts, texts, scorer=Levenshtein.normalized_similarity)
            > SAME_PLATE_SIMILARITY
        )
        weights = [by_text[t] for t in texts]
        mass = near.astype(float) @ weights
        ref = int(mass.argmax())
        kept = {t for t, close in zip(texts, near[ref], strict=True) if close}
        if sum(counts[t] for t in kept) < 2:
            return None  # no read agrees with another: nothing tells the plate from noise
        return kept

    def _fuse(
        self, rows: list[tuple[float, int, list[fusion.Distribution]]], length: int, looks: int
    ) -> fusion.Decoded:
        """The fused text of ``length`` characters: the reads of that length position by
        position, then the others aligned to their best string; its confidence counting
        ``looks`` independent looks (fusion.py), its characters' probabilities the mean's."""
        sums: list[fusion.Distribution] = [{} for _ in range(length)]
        for w, n, probs in rows:
            if n == length:
                fusion.add_rows(sums, probs, w)
        reference = fusion.best_text(sums)
        for w, n, probs in rows:
            if n != length:
                for i, j in fusion.aligned_positions(fusion.best_text(probs), reference):
                    fusion.add_row(sums[j], probs[i], w)
        positions = fusion.normalised(sums)
        decoded = fusion.decode(positions, self.formats)
        if looks <= 1 or not decoded.valid:
            return decoded
        looked = fusion.decode(fusion.sharpened(positions, looks), self.formats)
        if looked.text != decoded.text:
            return decoded  # (powers can reorder strings that differ in several places)
        return dataclasses.replace(
            decoded, confidence=looked.confidence, one_look=decoded.confidence
        )
