import os
import re
import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel

from streamer.config.schema import (
    DEFAULT_MODEL_REPOSITORY,
    CameraConfig,
    ConfigError,
    EventsConfig,
    KnownPlatesConfig,
    LogConfig,
    MetricsConfig,
    MotionConfig,
    Settings,
    TrackerConfig,
    TritonConfig,
    WebConfig,
    load_config,
)
from streamer.tracking.plate_formats import RUSSIAN_FORMATS

PROJECT = Path(__file__).resolve().parents[3]
CONFIGS = PROJECT / "configs"
MODELS: list[type[BaseModel]] = [
    Settings,
    CameraConfig,
    MotionConfig,
    TritonConfig,
    TrackerConfig,
    EventsConfig,
    WebConfig,
    MetricsConfig,
    LogConfig,
]
SECRET = "s3cr3t-pw"


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


# --------------------------------------------------------------------------- shipped configs


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
    assert settings.web.token is None  # ${LPR_WEB_TOKEN:-} unset
    # The reference claims to show the defaults: hold it to that.
    defaults = CameraConfig(name=gate.name, url=gate.url)
    assert gate == defaults
    assert settings.triton == TritonConfig(url="triton-gpu:8001")
    for section in ("tracker", "events", "web", "metrics", "log"):
        assert getattr(settings, section) == type(getattr(settings, section))(), section


def test_reference_config_mentions_every_key() -> None:
    text = (CONFIGS / "reference.yaml").read_text()
    for model in MODELS:
        for name in model.model_fields:
            assert re.search(rf"^\s*(- )?{name}:", text, re.MULTILINE), f"{model.__name__}.{name}"


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
    assert settings.web == WebConfig()
    assert settings.log.level == "DEBUG"
    assert settings.events.plate_formats == [r"[A-Z]{2}\d{2}[A-Z]{3}"]
    assert settings.events.file is None


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


# --------------------------------------------------------------------------- errors

CAMERA = "  - name: gate\n    url: rtsp://cam/stream\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "cameras:\n  - name: gate\n   url: rtsp://cam/x\n",
            ["invalid YAML at line 3, column"],
            id="bad-yaml",
        ),
        pytest.param(
            "cameras: [{name: gate, url: rtsp://cam/x}\n",
            ["invalid YAML at line"],
            id="unclosed-flow",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    sample_fps: 5\n    sample_fps: 6\n",
            ["duplicate key 'sample_fps'", "line 5"],
            id="duplicate-yaml-key",
        ),
        pytest.param("- name: gate\n", ["top level must be a mapping", "a list"], id="list"),
        pytest.param("", ["empty", "cameras"], id="empty-file"),
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
            f"cameras:\n{CAMERA}    on: 1\n",
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
        pytest.param("triton: {}\n", ["cameras: required key is missing"], id="no-cameras-key"),
        pytest.param("cameras: []\n", ["cameras: no cameras configured"], id="no-cameras"),
        pytest.param("cameras:\n", ["cameras: no cameras configured"], id="empty-cameras"),
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
            f"cameras:\n{CAMERA}  - name: yard\n    url: b.ts\n{CAMERA}",
            ["cameras: cameras[0] and cameras[2] are both named 'gate'", "must be unique"],
            id="duplicate-names",
        ),
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
            ["cameras[gate].enabled: Input should be a valid boolean", "(got 'maybe')"],
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
        pytest.param(
            f"cameras:\n{CAMERA}web: {{port: 9108}}\n",
            ["metrics: metrics.port and web.port are both 9108"],
            id="port-clash",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}log: {{format: xml}}\n",
            ["log.format: Input should be 'text' or 'json' (got 'xml')"],
            id="log-format",
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
    message = config_error(tmp_path, text)
    for part in expected:
        assert part in message


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


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: config file not found"):
        load_config(tmp_path / "nope.yaml")


def test_directory_is_not_a_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_unreadable_bytes(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_bytes(b"cameras: \xff\xfe\n")
    with pytest.raises(ConfigError, match=r"site\.yaml: not UTF-8"):
        load_config(path)


def test_config_error_is_structured(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, f"cameras:\n{CAMERA}    sample_fps: 0\n")
    error = info.value
    assert error.path == tmp_path / "site.yaml"
    assert [key for key, _ in error.problems] == ["cameras[gate].sample_fps"]
    assert error.__cause__ is None and error.__suppress_context__


# --------------------------------------------------------------------------- interpolation


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


# --------------------------------------------------------------------------- paths


def test_relative_file_paths_resolve_against_the_config_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "configs"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)  # not the config's folder
    path = write(
        folder,
        """
        cameras:
          - {name: a, url: clips/a.ts}
          - {name: b, url: 'file://../media/b.mp4'}
          - {name: c, url: /abs/c.mkv}
          - {name: d, url: 'file:///abs/my%20clip.ts'}
          - {name: e, url: rtsp://cam/x}
        triton: {model_repository: ../models}
        events: {file: out/events.jsonl}
        """,
    )
    settings = load_config(Path("configs/site.yaml"), env={})
    a, b, c, d, e = settings.cameras
    assert a.url == str(folder / "clips" / "a.ts") and a.is_file
    assert b.url == str(tmp_path / "media" / "b.mp4") and b.is_file
    assert c.url == "/abs/c.mkv" and c.file_path == Path("/abs/c.mkv")
    assert d.url == "/abs/my clip.ts"
    assert e.url == "rtsp://cam/x" and not e.is_file and e.file_path is None
    assert settings.triton.model_repository == tmp_path / "models"
    assert settings.events.file == folder / "out" / "events.jsonl"
    assert path.is_file()


def test_file_existence_is_not_checked(tmp_path: Path) -> None:
    settings = load_text(tmp_path, "cameras: [{name: a, url: missing.ts}]")
    assert settings.cameras[0].url == str(tmp_path / "missing.ts")


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


# --------------------------------------------------------------------------- secrets


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


def test_settings_are_immutable() -> None:
    camera = CameraConfig(name="a", url="rtsp://cam/x")
    with pytest.raises(ValueError, match="frozen"):
        camera.sample_fps = 1.0  # type: ignore[misc]
    assert camera.model_copy(update={"sample_fps": 1.0}).sample_fps == 1.0


def test_malformed_network_url_is_never_echoed(tmp_path: Path) -> None:
    config = tmp_path / "typo.yaml"
    # The '@' is missing: the password runs into the host and the port.
    config.write_text("cameras:\n  - {name: a, url: 'rtsp://admin:hunter2cam.local:554/x'}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert "cameras[a].url" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_web_off_loopback_needs_a_token(tmp_path: Path) -> None:
    config = tmp_path / "open.yaml"
    config.write_text("cameras: [{name: a, url: x.ts}]\nweb: {host: 0.0.0.0}\n")
    with pytest.raises(ConfigError, match=r"web\.token is required"):
        load_config(config)
    config.write_text("cameras: [{name: a, url: x.ts}]\nweb: {host: 0.0.0.0, token: t0k}\n")
    assert load_config(config).web.token is not None


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


def test_an_alias_bomb_is_refused_without_expanding_it(tmp_path: Path) -> None:
    levels = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for name, prev in zip("bcdefgh", "abcdefg", strict=True):
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    message = config_error(tmp_path, "\n".join(levels) + "\ncameras: []\n")
    assert "expands to more than 100000 values (YAML aliases?)" in message


def test_a_huge_or_endless_file_is_refused(tmp_path: Path) -> None:
    huge = write(tmp_path, "# " + "x" * (1024 * 1024) + "\ncameras: []\n")
    with pytest.raises(ConfigError, match="larger than 1024 KiB"):
        load_config(huge, env={})
    with pytest.raises(ConfigError, match="larger than 1024 KiB"):
        load_config(Path("/dev/zero"), env={})
