"""Error messages: the file, the key and the reason, never a secret."""

from pathlib import Path

import pytest

from streamer.config import ConfigError
from streamer.config.errors import _quotable
from streamer.foundation.redact import redact_text
from tests.streamer.config.config_files import (
    CAMERA,
    SECRET,
    assert_config_error,
    config_error,
    load_text,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            f"camera:\n{CAMERA}",
            ["camera: unknown key; did you mean 'cameras'?", "cameras: required key is missing"],
            id="top-level-typo",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    sampel_fps: 3\n",
            ["cameras[gate].sampel_fps: unknown key; did you mean 'sample_fps'?"],
            id="camera-key-typo",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    colour: red\n",
            ["cameras[gate].colour: unknown key", "allowed keys: name, url, enabled"],
            id="unknown-key-lists-allowed",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}sample_fps: 3\n",
            ["sample_fps: unknown key", "belongs under cameras[]"],
            id="key-in-wrong-section",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}triton: {{urll: 'x:1'}}\n",
            ["triton.urll: unknown key; did you mean 'url'?"],
            id="triton-key-typo",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    true: 1\n",
            ["cameras[gate]: key true is not a string: quote it"],
            id="non-string-key",
        ),
        pytest.param(
            "cameras:\n  - name: gate\n",
            ["cameras[gate].url: required key is missing"],
            id="missing-url",
        ),
        pytest.param(
            "cameras:\n  - url: rtsp://cam/x\n",
            ["cameras[0].name: required key is missing"],
            id="missing-name",
        ),
        pytest.param(
            "cameras: {name: gate, url: rtsp://cam/x}\n",
            ["cameras: should be a list, got a mapping"],
            id="cameras-not-a-list",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}triton: [1, 2]\n",
            ["triton: should be a mapping (key: value), got a list"],
            id="section-not-a-mapping",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    motion: {{threshhold: 9}}\n",
            ["cameras[gate].motion.threshhold: unknown key; did you mean 'threshold'?"],
            id="motion-key-typo",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    min_area: 0.01\n",
            ["cameras[gate].min_area: unknown key", "belongs under cameras[].motion"],
            id="motion-key-outside-motion",
        ),
    ],
)
def test_malformed_config_names_file_key_and_reason(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    assert_config_error(tmp_path, text, expected)


def test_several_problems_are_reported_together(tmp_path: Path) -> None:
    message = config_error(
        tmp_path,
        """
        cameras:
          - name: gate
            url: rtsp://cam/x
            sample_fps: 0
          - name: yard
            url: yard.ts
            sampel_fps: 3
        log: {level: loud}
        """,
    )
    assert "3 problems" in message
    for key in ("cameras[gate].sample_fps", "cameras[yard].sampel_fps", "log.level"):
        assert key in message
    assert f"{tmp_path / 'site.yaml'}: 3 problems" in message


def test_camera_named_by_index_when_the_name_is_not_unique(tmp_path: Path) -> None:
    message = config_error(
        tmp_path,
        f"cameras:\n{CAMERA}{CAMERA}    sample_fps: 0\n",
    )
    assert "cameras[1].sample_fps" in message


def test_config_error_is_structured(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, f"cameras:\n{CAMERA}    sample_fps: 0\n")
    error = info.value
    assert error.path == tmp_path / "site.yaml"
    assert [key for key, _ in error.problems] == ["cameras[gate].sample_fps"]
    assert error.__cause__ is None and error.__suppress_context__


@pytest.mark.parametrize(
    "camera",
    [
        # a later field of the camera is invalid
        f"url: rtsp://user:{SECRET}@host/x\n    sample_fps: 0",
        f"url: rtsp://user:{SECRET}@host/x\n    stall_timeout_s: 1",
        f"url: rtsp://user:{SECRET}@host/x\n    sampel_fps: 1",
        # the URL itself is invalid
        f"url: ftp://user:{SECRET}@host/x",
        f"url: rtsp://user:{SECRET}/x@host/y",
        f"url: rtsp://user:{SECRET}?@host/y",
        f"url: 'rtsp://user:{SECRET}@host/${{BAD VAR}}'",
        f"url: rtsp://user:{SECRET}@host/x: y",  # bad YAML on the URL's line
        # the URL put where something else belongs
        f"url: rtsp://cam/x\n    name2: rtsp://user:{SECRET}@host/x",
        f"url: rtsp://cam/x\n    rtsp_transport: rtsp://user:{SECRET}@host/x",
        f"url: rtsp://cam/x\n    rtsp://user:{SECRET}@host/x: 1",
    ],
)
def test_password_never_appears_in_config_errors(tmp_path: Path, camera: str) -> None:
    message = config_error(tmp_path, f"cameras:\n  - name: gate\n    {camera}\n")
    assert "cameras[gate]" in message or "invalid YAML at line 3" in message
    assert SECRET not in message


def test_password_not_in_errors_of_a_camera_without_a_valid_name(tmp_path: Path) -> None:
    message = config_error(
        tmp_path, f"cameras:\n  - url: rtsp://user:{SECRET}@host/x\n    sample_fps: 0\n"
    )
    assert "cameras[0].name: required key is missing" in message
    assert "cameras[0].sample_fps" in message
    assert SECRET not in message


@pytest.mark.parametrize("name", ["token", "password", "secret", "api_key", "auth", "signature"])
def test_config_errors_and_url_redaction_share_one_list_of_secret_names(name: str) -> None:
    """A name whose value a URL's query hides is a field whose value an error never quotes."""
    assert "hunter2" not in redact_text(f"http://host/x?{name}=hunter2")
    assert not _quotable(("mqtt", name), "hunter2")
    assert _quotable(("mqtt", "port"), "hunter2")
