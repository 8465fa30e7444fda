"""Config files written for a test, and the error a bad one gives (for tests/streamer/config/)."""

import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel

from streamer.config import (
    CameraConfig,
    ConfigError,
    DiscoveryConfig,
    EventsConfig,
    LogConfig,
    MetricsConfig,
    MotionConfig,
    MqttConfig,
    MqttTlsConfig,
    ReloadConfig,
    Settings,
    StorageConfig,
    TrackerConfig,
    TritonConfig,
    WebConfig,
    load_config,
)

PROJECT = Path(__file__).resolve().parents[3]
CONFIGS = PROJECT / "configs"
MODELS: list[type[BaseModel]] = [
    Settings,
    CameraConfig,
    MotionConfig,
    ReloadConfig,
    TritonConfig,
    TrackerConfig,
    EventsConfig,
    WebConfig,
    MetricsConfig,
    LogConfig,
    ReloadConfig,
    StorageConfig,
    MqttConfig,
    MqttTlsConfig,
    DiscoveryConfig,
]
SECRET = "s3cr3t-pw"
CAMERA = "  - name: gate\n    url: rtsp://cam/stream\n"


def write(tmp_path: Path, text: str, name: str = "site.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load_text(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> Settings:
    return load_config(write(tmp_path, text), env={} if env is None else env)


def config_error(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, text, env)
    message = str(info.value)
    assert "site.yaml" in message
    return message


def assert_config_error(tmp_path: Path, text: str, expected: list[str]) -> None:
    """The config ``text`` is refused with a message holding every part of ``expected``."""
    message = config_error(tmp_path, text)
    for part in expected:
        assert part in message, message
