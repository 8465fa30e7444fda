"""Reading a file: bounded, strict YAML; relative paths resolve against its folder."""

from pathlib import Path

import pytest

from streamer.config import ConfigError, load_config
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
            "cameras: [{name: gate, url: ${CAM_URL}}]\n",
            ["invalid YAML at line 1, column 30", 'must be quoted: "${VAR}"'],
            id="unquoted-variable-in-flow",
        ),
        pytest.param(
            f"cameras:\n{CAMERA}    sample_fps: 5\n    sample_fps: 6\n",
            ["duplicate key 'sample_fps'", "line 5"],
            id="duplicate-yaml-key",
        ),
        pytest.param("- name: gate\n", ["top level must be a mapping", "a list"], id="list"),
        pytest.param("", ["empty", "cameras"], id="empty-file"),
    ],
)
def test_malformed_config_names_file_key_and_reason(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    assert_config_error(tmp_path, text, expected)


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


def test_the_quoting_hint_comes_only_where_a_variable_broke_the_yaml(tmp_path: Path) -> None:
    message = config_error(tmp_path, "cameras: [{name: gate, url: rtsp://cam/x}\n")
    assert "invalid YAML" in message and "${VAR}" not in message
    # quoted, the variable is a plain string to YAML: no YAML error at all
    quoted = config_error(tmp_path, 'cameras: [{name: gate, url: "${LPR_TEST_UNSET_VAR}"}]\n')
    assert "invalid YAML" not in quoted and "LPR_TEST_UNSET_VAR" in quoted
