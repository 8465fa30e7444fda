"""A camera's section: its URL, sampling, timeouts, region of interest and motion gate."""

from pathlib import Path

import pytest

from streamer.config import CameraConfig, ConfigError, MotionConfig, load_config
from tests.streamer.config.config_files import (
    CAMERA,
    SECRET,
    assert_config_error,
    load_text,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "cameras:\n  - name: Gate Cam\n    url: rtsp://cam/x\n",
            ["cameras[0].name: camera name 'Gate Cam' is not allowed", "a-z"],
            id="bad-name",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    sample_fps: 0\n",
            ["cameras[gate].sample_fps: Input should be greater than 0 (got 0)", "<= 60"],
            id="fps-zero",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    sample_fps: -1\n",
            ["cameras[gate].sample_fps: Input should be greater than 0 (got -1)"],
            id="fps-negative",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    sample_fps: fast\n",
            ["cameras[gate].sample_fps: Input should be a valid number", "(got 'fast')"],
            id="fps-string",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    sample_fps: 61\n",
            ["cameras[gate].sample_fps: Input should be less than or equal to 60 (got 61)"],
            id="fps-too-high",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    sample_fps:\n",
            ["cameras[gate].sample_fps: Input should be a valid number (got null)"],
            id="fps-empty",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    enabled: maybe\n",
            ["cameras[gate].enabled: must be true or false, got 'maybe'"],
            id="bad-bool",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    rtsp_transport: quic\n",
            ["cameras[gate].rtsp_transport: Input should be 'tcp' or 'udp' (got 'quic')"],
            id="bad-transport",
        ),
        pytest.param(
            "cameras:\n  - name: gate\n    url: ftp://cam/x.ts\n",
            ["cameras[gate].url: unsupported URL scheme 'ftp://'", "rtsp://"],
            id="ftp-url",
        ),
        pytest.param(
            "cameras:\n  - name: gate\n    url: rtsp:///x\n",
            ["cameras[gate].url: no host"],
            id="url-without-host",
        ),
        pytest.param(
            "cameras:\n  - name: gate\n    url: ''\n",
            ["cameras[gate].url: String should have at least 1 character"],
            id="empty-url",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    read_timeout_s: 10\n    stall_timeout_s: 10\n",
            ["cameras[gate].stall_timeout_s: must be greater than read_timeout_s (10), got 10"],
            id="stall-equals-read",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    stall_timeout_s: 3\n",
            ["cameras[gate].stall_timeout_s: must be greater than read_timeout_s (5), got 3"],
            id="stall-below-default-read",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    reconnect_initial_delay_s: 5\n    reconnect_max_delay_s: 1\n",
            ["cameras[gate].reconnect_max_delay_s: must be >= reconnect_initial_delay_s (5)"],
            id="reconnect-delays",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    roi: [100, 0, 50, 80]\n",
            ["cameras[gate].roi: roi must be [x1, y1, x2, y2] with x2 > x1"],
            id="roi-inverted",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    roi: [0, -1, 50, 80]\n",
            ["cameras[gate].roi[1]: Input should be greater than or equal to 0 (got -1)"],
            id="roi-negative",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    roi: [0, 0, 50]\n",
            ["cameras[gate].roi: roi must be 4 pixel values [x1, y1, x2, y2], got 3"],
            id="roi-short",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    motion: {{min_area: 0}}\n",
            ["cameras[gate].motion.min_area: Input should be greater than 0 (got 0)", "<= 1"],
            id="motion-min-area",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    motion: {{threshold: 256}}\n",
            ["cameras[gate].motion.threshold: Input should be less than or equal to 255"],
            id="motion-threshold",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    motion: {{mask: [[[0, 0], [5, 5]]]}}\n",
            ["cameras[gate].motion.mask: mask[0] has 2 points: a polygon needs 3 to 100"],
            id="mask-too-few-points",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    motion: {{mask: [[[0, 0], [5, 5], [1, 2, 3]]]}}\n",
            ["cameras[gate].motion.mask: mask[0][2] must be one [x, y] point"],
            id="mask-bad-point",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    motion: {{mask: [[0, 0], [5, 5], [9, 0]]}}\n",
            ["cameras[gate].motion.mask: mask[0] is one point, not a polygon", "[[[x1, y1]"],
            id="mask-not-a-list-of-polygons",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    motion: {{mask: [[[0, 0], [5, -5], [9, 0]]]}}\n",
            ["cameras[gate].motion.mask[0][1][1]: Input should be greater than or equal to 0"],
            id="mask-negative",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    motion: {{stationary_interval_s: 0}}\n",
            ["cameras[gate].motion.stationary_interval_s: Input should be greater than 0"],
            id="motion-interval",
        ),
    ],
)
def test_malformed_config_names_file_key_and_reason(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    assert_config_error(tmp_path, text, expected)


def test_motion_section_defaults_and_mask(tmp_path: Path) -> None:
    motion = CameraConfig(name="a", url="rtsp://cam/x").motion
    assert motion == MotionConfig()
    assert (motion.enabled, motion.threshold, motion.min_area, motion.mask) == (
        True,
        20,
        0.0005,
        (),
    )
    assert motion.stationary_interval_s == 1.0
    settings = load_text(
        tmp_path,
        """
        cameras:
          - name: a
            url: rtsp://cam/x
            motion:
              enabled: true
              mask: [[[0, 0], [620, 0], [620, 60], [0, 60]], [[10, 10], [20, 10], [15, 30]]]
        """,
    )
    motion = settings.cameras[0].motion
    assert motion.enabled and motion.threshold == 20
    assert motion.mask == (((0, 0), (620, 0), (620, 60), (0, 60)), ((10, 10), (20, 10), (15, 30)))
    dumped = settings.redacted()["cameras"][0]["motion"]["mask"]
    assert dumped[0] == [[0, 0], [620, 0], [620, 60], [0, 60]]


@pytest.mark.parametrize(
    ("url", "is_file"),
    [
        ("rtsp://cam/x", False),
        ("RTSPS://cam/x", False),
        ("http://cam/x.mjpg", False),
        ("https://cam/x.m3u8", False),
        ("clip.ts", True),
        ("/data/clip.ts", True),
        ("file:///data/clip.ts", True),
    ],
)
def test_is_file(url: str, is_file: bool) -> None:
    assert CameraConfig(name="a", url=url).is_file is is_file


def test_password_never_appears_in_str_or_repr(tmp_path: Path) -> None:
    settings = load_text(
        tmp_path,
        f"""
        cameras:
          - name: gate
            url: rtsp://user:{SECRET}@host/x?token=tok-{SECRET}
        web: {{token: 'web-{SECRET}'}}
        """,
    )
    camera = settings.cameras[0]
    assert SECRET in camera.url  # the real value is there to use
    for text in (str(settings), repr(settings), str(camera), repr(camera), f"{camera!r}"):
        assert SECRET not in text
        assert "rtsp://***:***@host/x?token=***" in text
    assert SECRET not in str(settings.redacted())
    assert settings.redacted()["cameras"][0]["url"] == "rtsp://***:***@host/x?token=***"


def test_malformed_network_url_is_never_echoed(tmp_path: Path) -> None:
    config = tmp_path / "typo.yaml"
    # The '@' is missing: the password runs into the host and the port.
    config.write_text("cameras:\n  - {name: a, url: 'rtsp://admin:hunter2cam.local:554/x'}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert "cameras[a].url" in str(caught.value)
    assert "hunter2" not in str(caught.value)
