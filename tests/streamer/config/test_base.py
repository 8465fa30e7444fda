"""What every section keeps: plain values, no control characters, immutability."""

from pathlib import Path

import pytest

from streamer.config import CameraConfig, EventsConfig, TrackerConfig
from tests.streamer.config.config_files import config_error, load_text


def test_settings_are_immutable() -> None:
    camera = CameraConfig(name="a", url="rtsp://cam/x")
    with pytest.raises(ValueError, match="frozen"):
        camera.sample_fps = 1.0  # type: ignore[misc]
    assert camera.model_copy(update={"sample_fps": 1.0}).sample_fps == 1.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "cameras:\n  - {name: a, url: x.ts, sample_fps: true}\n",
            "cameras[a].sample_fps: must be a number, got true",
        ),
        (
            "cameras:\n  - {name: a, url: x.ts}\nevents: {min_reads: false}\n",
            "events.min_reads: must be a number, got false",
        ),
        (
            'cameras:\n  - {name: a, url: "x.ts\\nERROR forged line"}\n',
            "cameras[a].url: must not contain control characters",
        ),
        (
            'cameras:\n  - {name: a, url: x.ts}\nevents: {plate_formats: ["A\\tB"]}\n',
            "events.plate_formats: must not contain control characters",
        ),
        (
            "cameras:\n  - {name: a, url: x.ts}\ntracker: {iou_threshold: 0}\n",
            "tracker.iou_threshold: Input should be greater than 0",
        ),
    ],
)
def test_booleans_control_characters_and_a_zero_iou_are_refused(
    tmp_path: Path, text: str, expected: str
) -> None:
    assert expected in config_error(tmp_path, text)


def test_booleans_stay_booleans() -> None:
    assert TrackerConfig.model_validate({}).iou_threshold == 0.2
    assert EventsConfig.model_validate({"updates": False}).updates is False


@pytest.mark.parametrize(
    ("value", "shown"),
    [("'no'", "'no'"), ("yes", "'yes'"), ("on", "'on'"), ("off", "'off'"), ("1", "1")],
)
def test_a_boolean_is_true_or_false_and_nothing_else(
    tmp_path: Path, value: str, shown: str
) -> None:
    text = f"cameras:\n  - {{name: a, url: x.ts, realtime: {value}}}\n"
    message = config_error(tmp_path, text)
    assert f"cameras[a].realtime: must be true or false, got {shown}" in message


def test_true_and_false_also_come_from_the_environment(tmp_path: Path) -> None:
    text = "cameras:\n  - {name: a, url: x.ts, realtime: '${REALTIME}'}\nevents: {updates: False}\n"
    for given, expected in (("true", True), ("FALSE", False)):
        settings = load_text(tmp_path, text, {"REALTIME": given})
        assert settings.cameras[0].realtime is expected
        assert settings.events.updates is False
    # YAML 1.2: on is a word, so a camera may be called that (YAML 1.1 read it as true).
    named = load_text(tmp_path, "cameras:\n  - {name: on, url: x.ts}\n")
    assert named.cameras[0].name == "on"
