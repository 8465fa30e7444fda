"""The web:, metrics: and log: sections."""

from pathlib import Path

import pytest

from streamer.config import ConfigError, load_config
from tests.streamer.config.config_files import CAMERA, assert_config_error


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            f"cameras:\n{CAMERA}log: {{format: xml}}\n",
            ["log.format: Input should be 'text' or 'json' (got 'xml')"],
            id="log-format",
        ),
    ],
)
def test_malformed_config_names_file_key_and_reason(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    assert_config_error(tmp_path, text, expected)


def test_web_off_loopback_needs_a_token(tmp_path: Path) -> None:
    config = tmp_path / "open.yaml"
    config.write_text("cameras: [{name: a, url: x.ts}]\nweb: {host: 0.0.0.0}\n")
    with pytest.raises(ConfigError, match=r"web\.token is required"):
        load_config(config)
    config.write_text("cameras: [{name: a, url: x.ts}]\nweb: {host: 0.0.0.0, token: t0k}\n")
    assert load_config(config).web.token is not None
