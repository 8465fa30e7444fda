"""When tracked plates become passes: the ``tracker:``, ``events:`` and ``known_plates:`` sections.

The defaults and bounds of the decision rules are defined here and nowhere else: the tracking
stage (streamer/tracking/) takes them as ``TrackerParams`` and ``PassParams``, built by their
``from_config``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from streamer.config.base import CAMERA_NAME, Section, check_regex, empty_to_none, resolve_path
from streamer.domain.known_plates import PLATE_ENTRY
from streamer.domain.plate_formats import RUSSIAN_FORMATS


def _check_known_entry(entry: str) -> str:
    if not PLATE_ENTRY.fullmatch(entry):
        check_regex(entry)
    return entry


class KnownPlatesConfig(Section):
    """One labelled list of known plates (docs/events.md#known-plates)."""

    plates: list[
        Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_check_known_entry)]
    ] = Field(
        min_length=1,
        max_length=100_000,
        description="Plates (only 0-9 and A-Z: matched within max_distance edits) or regular "
        "expressions (anything else: matched whole, at distance 0).",
    )
    max_distance: int = Field(
        1,
        ge=0,
        le=3,
        description="Edits (a character changed, added or dropped) allowed between the "
        "decided text and a plate of this list.",
    )
    snap: bool = Field(
        False,
        description="Report the known plate's text instead of the decided one when they "
        "match within max_distance.",
    )
    alert: bool = Field(False, description='Mark events matching this list "alert": true.')

    @model_validator(mode="before")
    @classmethod
    def _list_shorthand(cls, value: Any) -> Any:
        return {"plates": value} if isinstance(value, list) else value


def _check_known_labels(lists: dict[str, KnownPlatesConfig]) -> dict[str, KnownPlatesConfig]:
    for label in lists:
        if not CAMERA_NAME.match(label):
            raise ValueError(
                f"label {label!r}: use 1-63 of a-z 0-9 _ -, starting with a letter or digit"
            )
    return lists


#: ``known_plates:`` (global, or per camera): label -> list.
KnownPlatesLists = Annotated[
    dict[str, KnownPlatesConfig], AfterValidator(_check_known_labels), Field(max_length=100)
]


class TrackerConfig(Section):
    """Tracking of plates across the sampled frames of one camera (ByteTrack style)."""

    iou_threshold: float = Field(
        0.2, gt=0, le=1, description="Minimum box IoU to match a detection to a track."
    )
    high_score: float = Field(
        0.4,
        gt=0,
        le=1,
        description="Detections at or above this score start, extend and confirm tracks.",
    )
    low_score: float = Field(
        0.2,
        ge=0,
        lt=1,  # below high_score, which is at most 1
        description="Detections between low_score and high_score extend tracks and start weak "
        "ones, which only a high_score detection confirms (< high_score); below low_score they "
        "are ignored.",
    )
    lost_track_buffer_s: float = Field(
        2.0, gt=0, le=600, description="Seconds a track survives without a matching detection."
    )
    min_hits: int = Field(
        2, ge=1, le=100, description="Matched frames before a track is confirmed."
    )

    @field_validator("low_score")
    @classmethod
    def _check_low(cls, low: float, info: ValidationInfo) -> float:
        high = info.data.get("high_score")
        if high is not None and low >= high:
            raise ValueError(f"must be less than high_score ({high:g}), got {low:g}")
        return low


class EventsConfig(Section):
    """When a tracked plate becomes an event, and where events go."""

    plate_formats: list[Annotated[str, AfterValidator(check_regex)]] = Field(
        default_factory=lambda: list(RUSSIAN_FORMATS.values()),
        min_length=1,
        max_length=100,
        description="Regular expressions a plate text must match whole to be valid; "
        "default: the Russian formats of streamer/domain/plate_formats.py.",
    )
    min_text_score: float = Field(
        0.5, ge=0, le=1, description="Readings with a lower text score are not counted."
    )
    min_reads: int = Field(
        2,
        ge=1,
        le=1000,
        description="Readings exactly equal to a track's text before it may be reported.",
    )
    min_confidence: float = Field(
        # Chosen on the labelled set (docs/ACCURACY.md, its calibration table).
        0.5,
        ge=0,
        le=1,
        description="Confidence (the text's probability among the valid plates, from the "
        "fused character probabilities) a track needs to be reported at all; below it the "
        'pass is withheld (lpr_passes_withheld_total{reason="low_confidence"}).',
    )
    confident_reads: int = Field(
        10,
        ge=1,
        le=10_000,
        description="Pieces of evidence after which a track is reported at once if its text "
        "has confident_share confidence and they back it (>= min_reads).",
    )
    confident_share: float = Field(
        0.8,
        ge=0.5,
        le=1,
        description="Confidence a track's text needs on one look (not counting independent "
        "looks, docs/events.md) to be reported early.",
    )
    confident_span_s: float = Field(
        2.0,
        ge=0,
        le=3600,
        description="Seconds of stream time a track's evidence must span before an early "
        "report: consecutive frames repeat the same misread, so many reads in a short time "
        "prove little.",
    )
    # What the two evidence thresholds mean on real footage, and how they were chosen:
    # docs/events.md ("Evidence").
    evidence_min_change: float = Field(
        1.5,
        ge=0,
        le=255,
        description="A reading is new evidence when the plate's crop changed by this mean "
        "grey-level difference (0-255) since the track's last counted reading...",
    )
    evidence_min_shift: float = Field(
        0.15,
        ge=0,
        le=10,
        description="...or the plate moved by this fraction of its height; a still image "
        "read again is not (0 and 0: every reading counts).",
    )
    max_delay_s: float = Field(
        6.0,
        gt=0,
        le=3600,
        description="Seconds after a track's first reading by which it is reported anyway "
        "(or when it ends, if sooner).",
    )
    updates: bool = Field(
        True,
        description="Report a correction (plate.updated, same event_id) when later evidence "
        "changes a reported pass's text.",
    )
    dedup_window_s: float = Field(
        300.0,
        ge=0,
        le=86_400,
        description="Seconds during which the same text on the same camera is not reported "
        "again; 0: no deduplication.",
    )
    crop_jpeg_quality: int = Field(
        90, ge=10, le=100, description="JPEG quality of the plate crop attached to an event."
    )
    stdout: bool = Field(True, description="Write events to stdout as JSON lines.")
    file: Path | None = Field(
        None,
        description="Also append events as JSON lines to this file (relative: to the config "
        "file's folder); absent: no file.",
    )

    @field_validator("plate_formats", mode="before")
    @classmethod
    def _default_formats(cls, value: Any) -> Any:
        return list(RUSSIAN_FORMATS.values()) if value is None else value

    @field_validator("file", mode="before")
    @classmethod
    def _file_empty_is_none(cls, value: Any) -> Any:
        return empty_to_none(value)

    @field_validator("confident_reads")
    @classmethod
    def _check_confident_reads(cls, value: int, info: ValidationInfo) -> int:
        min_reads = info.data.get("min_reads")
        if min_reads is not None and value < min_reads:
            raise ValueError(f"must be >= min_reads ({min_reads}), got {value}")
        return value

    @field_validator("file")
    @classmethod
    def _resolve_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else Path(resolve_path(value, info))
