"""The tracker:, events: and known_plates: sections."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from streamer.config import EventsConfig, TrackerConfig
from tests.streamer.config.config_files import CAMERA, assert_config_error, load_text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            f"cameras:\n{CAMERA}events:\n  plate_formats: ['A\\d+', '[A-']\n",
            ["events.plate_formats[1]: invalid regular expression '[A-'", "unterminated"],
            id="bad-regex",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}events: {{plate_formats: []}}\n",
            ["events.plate_formats: at least one plate format is needed"],
            id="no-plate-formats",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}events: {{min_reads: 5, confident_reads: 3}}\n",
            ["events.confident_reads: must be >= min_reads (5), got 3"],
            id="confident-reads",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}events: {{confident_share: 0.3}}\n",
            ["events.confident_share: Input should be greater than or equal to 0.5 (got 0.3)"],
            id="confident-share",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}tracker: {{low_score: 0.5}}\n",
            ["tracker.low_score: must be less than high_score (0.4), got 0.5"],
            id="low-above-high",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}known_plates: {{staff: ['A(12']}}\n",
            ["known_plates.staff.plates[0]: invalid regular expression 'A(12'"],
            id="known-plates-bad-regex",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}known_plates: {{Staff List: [A123BC77]}}\n",
            ["known_plates: label 'Staff List': use 1-63 of a-z 0-9 _ -"],
            id="known-plates-bad-label",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    known_plates: {{vip: {{plates: [A1], max_distance: 4}}}}\n",
            ["cameras[gate].known_plates.vip.max_distance: Input should be less than or equal"],
            id="known-plates-distance",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}known_plates: {{staff: []}}\n",
            ["known_plates.staff.plates: List should have at least 1 item"],
            id="known-plates-empty",
        ),
    ],
)
def test_malformed_config_names_file_key_and_reason(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    assert_config_error(tmp_path, text, expected)


def test_known_plates_lists_shorthand_and_camera_lists_first(tmp_path: Path) -> None:
    settings = load_text(
        tmp_path,
        """\
        cameras:
          - name: gate
            url: rtsp://cam/x
            known_plates:
              staff: {plates: [O567AM76], max_distance: 2, snap: true}
          - name: yard
            url: rtsp://cam/y
        known_plates:
          staff: [A123BC77]
          stolen: {plates: ['X\\d{3}..77'], alert: true}
        """,
    )
    assert settings.known_plates["staff"].plates == ["A123BC77"]
    assert settings.known_plates["staff"].max_distance == 1  # the default
    gate, yard = settings.cameras
    # The camera's "staff" list replaces the global one; "stolen" applies everywhere.
    gate_known = settings.known_plates_for(gate)
    match = gate_known.match("C567AC76")
    assert match is not None and (match.label, match.plate, match.snap) == (
        "staff",
        "O567AM76",
        True,
    )
    assert gate_known.match("A123BC77") is None
    yard_match = settings.known_plates_for(yard).match("A123BC76")
    assert yard_match is not None and yard_match.label == "staff"
    stolen = settings.known_plates_for(yard).match("X123AB77")
    assert stolen is not None and stolen.alert


# The tracker's and the pass detector's parameters (streamer/tracking/) are built from these
# sections and keep no bounds of their own: these are the only checks of them.
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"iou_threshold": 0.0}, "iou_threshold"),
        ({"low_score": 0.5, "high_score": 0.4}, "low_score"),
        ({"lost_track_buffer_s": -1.0}, "lost_track_buffer_s"),
        ({"lost_track_buffer_s": float("inf")}, "lost_track_buffer_s"),
        ({"min_hits": 0}, "min_hits"),
    ],
)
def test_bad_tracker_values_are_refused(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        TrackerConfig(**kwargs)  # type: ignore[arg-type]
    assert [error["loc"] for error in info.value.errors()] == [(field,)]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"min_reads": 0}, "min_reads"),
        ({"confident_reads": 0}, "confident_reads"),
        ({"min_confidence": 1.5}, "min_confidence"),
        ({"confident_share": 1.5}, "confident_share"),
        ({"confident_span_s": -1.0}, "confident_span_s"),
        ({"max_delay_s": -1.0}, "max_delay_s"),
        ({"dedup_window_s": float("nan")}, "dedup_window_s"),
        ({"evidence_min_change": -1.0}, "evidence_min_change"),
        ({"evidence_min_change": 300.0}, "evidence_min_change"),
        ({"evidence_min_shift": float("nan")}, "evidence_min_shift"),
    ],
)
def test_bad_decision_values_are_refused(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        EventsConfig(**kwargs)  # type: ignore[arg-type]
    assert [error["loc"] for error in info.value.errors()] == [(field,)]
