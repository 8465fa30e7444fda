"""${VAR} and ${VAR:-default} in string values."""

from pathlib import Path

import pytest

from streamer.config import load_config
from tests.streamer.config.config_files import (
    CAMERA,
    assert_config_error,
    config_error,
    load_text,
    write,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "cameras:\n  - name: gate\n    url: rtsp://u:${PW}@cam/x\n",
            ["cameras[gate].url: environment variable PW is not set", "${PW:-value}"],
            id="missing-env-var",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}web: {{host: '${{bad name}}'}}\n",
            ["web.host: malformed reference '${bad name}'"],
            id="malformed-reference",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}web: {{host: 'a${{b'}}\n",
            ["web.host: malformed reference '${'"],
            id="unterminated-reference",
        ),
    ],
)
def test_malformed_config_names_file_key_and_reason(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    assert_config_error(tmp_path, text, expected)


def test_interpolation_with_defaults_and_escapes(tmp_path: Path) -> None:
    settings = load_text(
        tmp_path,
        """
        cameras:
          - name: ${CAM_NAME:-gate}
            url: rtsp://${CAM_HOST}:${CAM_PORT:-554}/live
            sample_fps: ${FPS:-2.5}
            enabled: ${ENABLED:-true}
        web:
          host: ${WEB_HOST:-}0.0.0.0
          token: $${NOT_A_VAR} and $$ and $5 and ${WORD:-a:-b}
        events:
          plate_formats: ['\\d{3}$$', 'x$${y}']
        """,
        env={"CAM_HOST": "cam.local", "FPS": "7"},
    )
    camera = settings.cameras[0]
    assert camera.name == "gate"
    assert camera.url == "rtsp://cam.local:554/live"
    assert camera.sample_fps == 7.0 and camera.enabled is True
    assert settings.web.host == "0.0.0.0"
    assert settings.web.token is not None
    assert settings.web.token.get_secret_value() == "${NOT_A_VAR} and $$ and $5 and a:-b"
    assert settings.events.plate_formats == [r"\d{3}$$", "x${y}"]


def test_substituted_values_are_not_expanded_again(tmp_path: Path) -> None:
    settings = load_text(
        tmp_path,
        "cameras: [{name: a, url: 'rtsp://u:${PW}@cam/x'}]\n",
        env={"PW": "${HOME}"},
    )
    assert settings.cameras[0].url == "rtsp://u:${HOME}@cam/x"


def test_keys_and_comments_are_not_interpolated(tmp_path: Path) -> None:
    settings = load_text(
        tmp_path,
        """
        # ${UNSET_IN_COMMENT} is fine here
        cameras: [{name: a, url: rtsp://cam/x}]  # ${ALSO_UNSET}
        """,
    )
    assert settings.cameras[0].name == "a"
    message = config_error(tmp_path, "cameras: [{name: a, url: rtsp://cam/x}]\n${KEY}: 1\n")
    assert "${KEY}: unknown key" in message


def test_environment_defaults_to_os_environ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LPR_TEST_FPS", "3")
    path = write(tmp_path, "cameras: [{name: a, url: rtsp://cam/x, sample_fps: '${LPR_TEST_FPS}'}]")
    assert load_config(path).cameras[0].sample_fps == 3.0


def test_interpolated_values_are_validated(tmp_path: Path) -> None:
    message = config_error(
        tmp_path,
        f"cameras:\n{CAMERA}    sample_fps: ${{FPS:-fast}}\n",
    )
    assert "cameras[gate].sample_fps" in message and "(got 'fast')" in message
