"""The triton: section."""

from pathlib import Path

import pytest

from tests.streamer.config.config_files import CAMERA, assert_config_error


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            f"cameras:\n{CAMERA}triton: {{url: 'grpc://triton:8001'}}\n",
            ["triton.url: expected host:port without a scheme"],
            id="triton-url-scheme",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}triton: {{url: 'triton:99999'}}\n",
            ["triton.url: port must be 1-65535"],
            id="triton-url-port",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}triton: {{max_in_flight_per_camera: 17}}\n",
            ["triton.max_in_flight_per_camera: Input should be less than or equal to 16"],
            id="in-flight",
        ),
    ],
)
def test_malformed_config_names_file_key_and_reason(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    assert_config_error(tmp_path, text, expected)
