"""The root: shipped configs, defaults, the docs, and the checks across sections."""

import os
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from streamer.config import (
    CameraConfig,
    ConfigError,
    DiscoveryConfig,
    KnownPlatesConfig,
    MqttConfig,
    MqttTlsConfig,
    Settings,
    TritonConfig,
    WebConfig,
    load_config,
)
from streamer.domain.plate_formats import RUSSIAN_FORMATS
from streamer.foundation.paths import DEFAULT_MODEL_REPOSITORY
from tests.streamer.config.config_files import (
    CAMERA,
    CONFIGS,
    MODELS,
    PROJECT,
    SECRET,
    assert_config_error,
    load_text,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("triton: {}\n", ["cameras: required key is missing"], id="no-cameras-key"),
        pytest.param("cameras: []\n", ["cameras: no cameras configured"], id="no-cameras"),
        pytest.param("cameras:\n", ["cameras: no cameras configured"], id="empty-cameras"),
        pytest.param(
            f"cameras:\n{CAMERA}  - name: yard\n    url: b.ts\n{CAMERA}",
            ["cameras: cameras[0] and cameras[2] are both named 'gate'", "must be unique"],
            id="duplicate-names",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}web: {{port: 9108}}\n",
            ["metrics: metrics.port and web.port are both 9108"],
            id="port-clash",
        ),
    ],
)
def test_malformed_config_names_file_key_and_reason(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    assert_config_error(tmp_path, text, expected)


def test_demo_config_loads() -> None:
    settings = load_config(CONFIGS / "demo.yaml", env={})
    (camera,) = settings.cameras
    assert camera.name == "yard"
    assert camera.is_file and camera.realtime is False and camera.sample_fps == 5
    expected = os.path.normpath(CONFIGS / "../../shared/assets/media/yard_cam.ts")
    assert camera.url == expected and camera.file_path == Path(expected)
    assert settings.triton.url is None
    assert settings.triton.model_repository == DEFAULT_MODEL_REPOSITORY
    assert settings.events.stdout is True


def test_demo_config_takes_the_assets_dir_from_the_environment(tmp_path: Path) -> None:
    settings = load_config(CONFIGS / "demo.yaml", env={"LPR_ASSETS_DIR": str(tmp_path)})
    assert settings.cameras[0].url == str(tmp_path / "media" / "yard_cam.ts")


def test_reference_config_loads_and_shows_the_defaults() -> None:
    settings = load_config(CONFIGS / "reference.yaml", env={"CAM_PASSWORD": SECRET})
    gate, exit_lane = settings.cameras
    assert SECRET in gate.url and SECRET in exit_lane.url
    assert gate.redacted_url.startswith("rtsp://***:***@192.168.1.64:554/")
    assert settings.triton.url == "triton-gpu:8001"
    assert settings.web.token is None  # ${WEB_TOKEN:-} unset
    # The reference claims to show the defaults: hold it to that.
    defaults = CameraConfig(name=gate.name, url=gate.url)
    assert gate == defaults
    assert settings.triton == TritonConfig(url="triton-gpu:8001")
    for section in ("tracker", "events", "metrics", "log"):
        assert getattr(settings, section) == type(getattr(settings, section))(), section
    # (a relative path resolves against the config file's folder)
    assert settings.web == WebConfig(link_key_path=CONFIGS / "data" / "link.key")


def test_reference_config_mentions_every_key() -> None:
    text = (CONFIGS / "reference.yaml").read_text()
    # The optional mqtt: section is off by default: its keys are there commented out.
    commented = {MqttConfig, MqttTlsConfig, DiscoveryConfig}
    for model in MODELS:
        # triton.urls is the alternative to triton.url (one of them only): commented too.
        comment = r"(#\s*)?" if model in commented or model is TritonConfig else ""
        for name in model.model_fields:
            found = re.search(rf"^\s*{comment}(- )?{name}:", text, re.MULTILINE)
            assert found, f"{model.__name__}.{name}"


def test_reference_config_needs_the_camera_password() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(CONFIGS / "reference.yaml", env={})
    message = str(info.value)
    assert "reference.yaml" in message
    assert "cameras[gate].url" in message and "cameras[exit-lane].url" in message
    assert "CAM_PASSWORD is not set" in message


def test_docs_mention_every_key() -> None:
    text = (PROJECT / "docs" / "config.md").read_text()
    # Known-plate lists are commented out in reference.yaml (an example, not a default).
    for model in [*MODELS, KnownPlatesConfig]:
        for name in model.model_fields:
            assert f"`{name}`" in text, f"{model.__name__}.{name} missing from docs/config.md"


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_field_is_described_and_models_forbid_extra_keys(model: type[BaseModel]) -> None:
    assert model.model_config.get("extra") == "forbid"
    for name, field in model.model_fields.items():
        assert field.description, f"{model.__name__}.{name} has no description"


def test_defaults() -> None:
    settings = Settings(cameras=[CameraConfig(name="a", url="rtsp://cam/x")])
    camera = settings.cameras[0]
    assert (camera.enabled, camera.sample_fps, camera.realtime, camera.roi) == (
        True,
        5.0,
        True,
        None,
    )
    assert (camera.rtsp_transport, camera.stall_timeout_s, camera.reconnect_max_delay_s) == (
        "tcp",
        10.0,
        30.0,
    )
    assert settings.triton.model == "plate_recognition"
    assert settings.triton.max_in_flight_per_camera == 2
    assert settings.tracker.low_score < settings.tracker.high_score
    assert settings.events.plate_formats == list(RUSSIAN_FORMATS.values())
    assert settings.events.crop_jpeg_quality == 90
    assert (settings.web.host, settings.web.port, settings.metrics.port) == (
        "127.0.0.1",
        8080,
        9108,
    )
    assert (settings.log.level, settings.log.format) == ("INFO", "text")


def test_empty_sections_mean_defaults_and_level_is_case_insensitive(tmp_path: Path) -> None:
    settings = load_text(
        tmp_path,
        """
        cameras: [{name: a, url: rtsp://cam/x}]
        web:
        log: {level: debug}
        events: {plate_formats: ['[A-Z]{2}\\d{2}[A-Z]{3}'], file: ""}
        """,
    )
    assert settings.web == WebConfig(link_key_path=tmp_path / "data" / "link.key")
    assert settings.log.level == "DEBUG"
    assert settings.events.plate_formats == [r"[A-Z]{2}\d{2}[A-Z]{3}"]
    assert settings.events.file is None


def test_the_link_key_lives_beside_the_config_even_without_a_web_section(tmp_path: Path) -> None:
    settings = load_text(tmp_path, "cameras: [{name: a, url: rtsp://cam/x}]\n")
    assert settings.web.link_key_path == tmp_path / "data" / "link.key"
    assert settings.storage.path.parent == settings.web.link_key_path.parent
