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


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        ("{urls: ['http://stun.example.org']}", "is not a stun:, turn: or turns: URL"),
        ("{urls: ['turn:turn.example.org:3478']}", "needs username and credential, or"),
        ("{urls: ['turn:t.example.org'], username: u}", "username and credential go together"),
        (
            "{urls: ['turn:t.example.org'], username: u, credential: p, shared_secret: s}",
            "not both",
        ),
        ("{urls: []}", "List should have at least 1 item"),
    ],
)
def test_an_ice_server_says_how_the_browser_logs_in(
    tmp_path: Path, server: str, expected: str
) -> None:
    config = tmp_path / "ice.yaml"
    config.write_text(f"cameras: [{{name: a, url: x.ts}}]\nweb: {{ice_servers: [{server}]}}\n")
    with pytest.raises(ConfigError, match=r"web\.ice_servers\[0\]") as error:
        load_config(config)
    assert expected in str(error.value)
    assert "'p'" not in str(error.value) and "'s'" not in str(error.value)  # never quoted


def test_stun_alone_and_turn_with_a_shared_secret_are_accepted(tmp_path: Path) -> None:
    config = tmp_path / "ice.yaml"
    config.write_text(
        "cameras: [{name: a, url: x.ts}]\n"
        "web:\n  ice_servers:\n    - {urls: ['stun:stun.example.org:3478']}\n"
        "    - {urls: ['turn:turn.example.org:3478?transport=tcp'], shared_secret: s3cr3t}\n"
    )
    web = load_config(config).web
    assert [s.urls for s in web.ice_servers] == [
        ["stun:stun.example.org:3478"],
        ["turn:turn.example.org:3478?transport=tcp"],
    ]
    assert "s3cr3t" not in repr(web)
