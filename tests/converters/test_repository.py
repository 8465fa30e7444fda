"""`python -m converters build`: complete repositories for both targets, or nothing at all."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2

from converters import assets
from converters.cli import main
from converters.model_config import DEFAULT_INPUT_HW, load_config

MODELS = ("detector", "stn", "lprnet", "plate_recognition")
WITH_REGIONS = (*MODELS, "detector_region")


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
def assets_copy(tmp_path: Path) -> Path:
    """A private copy of the weights, so a test may break one."""
    root = tmp_path / "assets"
    (root / "weights").mkdir(parents=True)
    for asset in assets.WEIGHTS:
        shutil.copyfile(assets.verify(asset, assets.default_assets_dir()), root / asset.path)
    return root


def test_gpu_target_is_libtorch_with_dynamic_batching(tmp_path: Path) -> None:
    out = tmp_path / "gpu_repo"
    assert main(["build", "--target", "gpu", "--out", str(out), "--input-size", "640"]) == 0
    for name in ("detector", "stn", "lprnet"):
        config = load_config(out / name / "config.pbtxt")
        assert config.name == name
        assert config.platform == "pytorch_libtorch"
        assert config.max_batch_size >= 16
        assert list(config.dynamic_batching.preferred_batch_size)
        assert max(config.dynamic_batching.preferred_batch_size) <= config.max_batch_size
        assert [g.kind for g in config.instance_group] == [
            model_config_pb2.ModelInstanceGroup.KIND_GPU
        ]
        assert (out / name / "1" / "model.pt").stat().st_size > 10_000
        assert not (out / name / "1" / "model.py").exists()
    detector = load_config(out / "detector" / "config.pbtxt")
    assert list(detector.input[0].dims) == [3, 640, 640]
    assert list(detector.output[0].dims) == [5, 8400]
    bls = load_config(out / "plate_recognition" / "config.pbtxt")
    assert bls.backend == "python"
    assert bls.model_transaction_policy.decoupled
    assert bls.parameters["detector_input_height"].string_value == "640"
    assert bls.parameters["detector_head_layout"].string_value == "v8"
    assert (out / "plate_recognition" / "1" / "model.py").is_file()
    assert (out / "plate_recognition" / "1" / "plate_ops.py").is_file()
    assert [g.count for g in bls.instance_group] == [2]  # the GPU target's default
    assert [i.name for i in bls.input] == ["image", "image_i420", "focus"]
    assert all(i.optional for i in bls.input)
    # The same detector for regions of the whole frame's input, at the default 480x480.
    region = load_config(out / "detector_region" / "config.pbtxt")
    assert region.platform == "pytorch_libtorch"
    assert list(region.input[0].dims) == [3, 480, 480]
    assert list(region.output[0].dims) == [5, 4725]
    assert bls.parameters["region_detector_model"].string_value == "detector_region"
    assert bls.parameters["region_input_height"].string_value == "480"
    assert bls.parameters["region_max_batch_size"].string_value == str(region.max_batch_size)


def test_cpu_target_is_python_backend_running_torchscript(tmp_path: Path) -> None:
    out = tmp_path / "cpu_repo"
    assert main(["build", "--target", "cpu", "--runtime", "torchscript", "--out", str(out)]) == 0
    for name in ("detector", "stn", "lprnet"):
        config = load_config(out / name / "config.pbtxt")
        assert config.backend == "python" and not config.platform
        assert [g.kind for g in config.instance_group] == [
            model_config_pb2.ModelInstanceGroup.KIND_CPU
        ]
        assert config.HasField("dynamic_batching")
        assert (out / name / "1" / "model.py").is_file()
    detector_config = load_config(out / "detector" / "config.pbtxt")
    assert list(detector_config.input[0].dims) == [3, *DEFAULT_INPUT_HW]  # 736x1280
    # Default CPU detector: two single-thread instances; the recognisers one instance.
    assert [g.count for g in detector_config.instance_group] == [2]
    assert detector_config.parameters["torch_threads"].string_value == "1"
    assert [g.count for g in load_config(out / "stn" / "config.pbtxt").instance_group] == [1]
    bls_path = out / "plate_recognition" / "config.pbtxt"
    assert [g.count for g in load_config(bls_path).instance_group] == [1]
    assert sorted(p.name for p in out.iterdir()) == sorted([*WITH_REGIONS, "build_info.json"])
    # A rebuild replaces the previous one cleanly (no leftovers, no staging folders).
    options = ["--input-size", "640", "--cpu-detector-instances", "3"]
    options += ["--cpu-detector-threads", "2", "--bls-instances", "3"]
    assert (
        main(["build", "--target", "cpu", "--runtime", "torchscript", "--out", str(out), *options])
        == 0
    )
    assert sorted(p.name for p in out.iterdir()) == sorted([*WITH_REGIONS, "build_info.json"])
    assert not list(tmp_path.glob(".*building*"))
    detector_config = load_config(out / "detector" / "config.pbtxt")
    assert list(detector_config.input[0].dims) == [3, 640, 640]
    assert [g.count for g in detector_config.instance_group] == [3]
    assert detector_config.parameters["torch_threads"].string_value == "2"
    assert [g.count for g in load_config(bls_path).instance_group] == [3]
    # Without a region detector, the one an earlier build made goes, and the BLS is told.
    no_regions = ["--input-size", "640", "--region-size", "0"]
    assert main(["build", "--runtime", "torchscript", "--out", str(out), *no_regions]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([*MODELS, "build_info.json"])
    assert load_config(bls_path).parameters["region_detector_model"].string_value == ""


@pytest.mark.parametrize("size", ["33", "-32", "32", "big"])
def test_region_size_must_be_0_or_a_multiple_of_32(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], size: str
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["build", "--out", str(tmp_path / "repo"), "--region-size", size])
    assert stop.value.code == 2
    assert "--region-size" in capsys.readouterr().err
    assert not (tmp_path / "repo").exists()


@pytest.mark.parametrize(
    "option", ["--cpu-detector-instances", "--cpu-detector-threads", "--bls-instances"]
)
def test_cpu_detector_sizes_must_be_positive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["build", "--out", str(tmp_path / "repo"), option, "0"])
    assert stop.value.code == 2
    assert f"{option}: must be 1 or more, got 0" in capsys.readouterr().err
    assert not (tmp_path / "repo").exists()


@pytest.mark.parametrize("breakage", ["missing", "corrupt", "wrong-network"])
def test_bad_checkpoint_stops_with_one_message_and_writes_nothing(
    tmp_path: Path, assets_copy: Path, capsys: pytest.CaptureFixture[str], breakage: str
) -> None:
    out = tmp_path / "repo"
    out.mkdir()
    (out / "previous.txt").write_text("an earlier build")
    before = _tree(out)
    lprnet = assets_copy / "weights" / "lprnet.pth"
    if breakage == "missing":
        lprnet.unlink()
    elif breakage == "corrupt":
        data = bytearray(lprnet.read_bytes())
        data[len(data) // 2] ^= 0xFF
        lprnet.write_bytes(bytes(data))
    else:
        shutil.copyfile(assets_copy / "weights" / "stn.pth", lprnet)

    code = main(["build", "--out", str(out), "--assets-dir", str(assets_copy)])

    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("error: ") == 1 and "Traceback" not in err
    assert "lprnet.pth" in err
    if breakage != "missing":
        assert "sha256" in err
    assert _tree(out) == before
    assert not list(tmp_path.glob(".*building*"))


def test_own_detector_checkpoint_skips_the_hash_but_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bogus = tmp_path / "my_detector.pt"
    bogus.write_bytes(b"definitely not a model")
    out = tmp_path / "repo"
    assert main(["build", "--out", str(out), "--detector", str(bogus)]) == 1
    assert "not an Ultralytics checkpoint" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_check_command_lists_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "repo"
    assert main(["build", "--target", "gpu", "--out", str(out), "--input-size", "320"]) == 0
    capsys.readouterr()
    assert main(["check", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(
        line.startswith("detector: pytorch_libtorch") and "KIND_GPU" in line for line in lines
    )
    assert any(line.startswith("plate_recognition: python") for line in lines)
