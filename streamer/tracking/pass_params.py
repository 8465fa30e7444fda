"""The rules of the pass detector (streamer/tracking/passes.py): when a tracked plate is
reported, built from the ``events:`` config section and a camera's ``decide``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from streamer.config import CameraConfig, EventsConfig

#: ``fast``: report at max_delay_s, correct later; ``sure``: wait for confidence or the end.
Decide = Literal["fast", "sure"]


@dataclass(frozen=True, slots=True)
class PassParams:
    """When a tracked plate is reported.

    ``min_reads``: reads exactly equal to the voted text needed to report at
    all; the guard against a consensus no frame showed. ``min_confidence``: the
    vote's confidence needed to report at all. ``confident_reads`` /
    ``confident_share`` / ``confident_span_s``: an early report needs this
    many pieces of evidence within one edit of the text, this confidence, and
    evidence spanning this many stream seconds; higher
    means later but surer. ``max_delay_s``: after this long since a track was
    first seen it is reported as soon as it qualifies (``decide: fast``).
    ``dedup_window_s``: the same text is not reported twice on a camera within
    this many seconds. ``updates``: report corrections. ``evidence_min_change`` /
    ``evidence_min_shift``: when a read is new evidence (streamer/tracking/evidence.py).

    Their defaults and bounds are the ``events:`` config section's and, for ``decide``, a
    camera's (streamer/config/): build one with :meth:`from_config`.
    """

    min_reads: int
    min_confidence: float
    confident_reads: int
    confident_share: float
    confident_span_s: float
    max_delay_s: float
    dedup_window_s: float
    decide: Decide
    updates: bool
    evidence_min_change: float
    evidence_min_shift: float

    @classmethod
    def from_config(cls, events: EventsConfig, decide: Decide) -> PassParams:
        """The rules of an ``events:`` section, for a camera that decides ``decide``."""
        return cls(
            min_reads=events.min_reads,
            min_confidence=events.min_confidence,
            confident_reads=events.confident_reads,
            confident_share=events.confident_share,
            confident_span_s=events.confident_span_s,
            max_delay_s=events.max_delay_s,
            dedup_window_s=events.dedup_window_s,
            decide=decide,
            updates=events.updates,
            evidence_min_change=events.evidence_min_change,
            evidence_min_shift=events.evidence_min_shift,
        )

    @classmethod
    def defaults(cls) -> PassParams:
        """The ``events:`` section's defaults and a camera's default ``decide``, for a
        detector built without a config."""
        return cls.from_config(EventsConfig(), CameraConfig.model_fields["decide"].default)
