"""bench/crop_padding.py on the real models and footage: the default pad reads at least as
well as the seed's 0.2, and reads the van's plate right."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.crop_padding import BLACK, SILVER, VAN, main
from converters.paths import MODEL_REPOSITORY, import_plate_ops

plate_ops = import_plate_ops()


def _openvino_repository() -> None:
    info_path = MODEL_REPOSITORY / "build_info.json"
    if not info_path.is_file():
        pytest.fail("model_repository/ is not built: run `make models` (or `make test`)")
    if json.loads(info_path.read_text()).get("runtime") != "openvino":
        pytest.skip("model_repository/ is not an OpenVINO build (CPU_RUNTIME=openvino)")


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs Debian's ffmpeg")
def test_the_default_pad_reads_the_black_car_and_the_van_at_least_as_well_as_the_seed_pad(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _openvino_repository()
    out = tmp_path / "crop_padding.json"
    argv = ["--variants", "original", "--every", "20", "--pads", "0.05,0.2"]
    result = main([*argv, "--out", str(out), "--clips", str(tmp_path / "clips")])

    assert (tmp_path / "clips" / "original.ts").is_file()  # built by bench.accuracy's recipe
    assert json.loads(out.read_text()) == result
    assert result["pads"] == [0.05, 0.2]
    assert result["default_pad"] == plate_ops.CROP_PAD_RATIO == 0.05
    assert result["truth"] == {"black": BLACK, "silver": SILVER, "van": VAN}
    assert list(result["variants"]) == ["original"]
    original = result["variants"]["original"]
    assert original["frames"] == 6  # frames 0, 20, ..., 100 of 120
    assert sorted(original["pads"]) == ["0.05", "0.2"]
    for by_car in original["pads"].values():
        assert sorted(by_car) == ["black", "silver"]
        for figure in by_car.values():
            assert 0 <= figure["exact"] <= figure["total"] == sum(figure["reads"].values())
    black = {pad: original["pads"][pad]["black"] for pad in ("0.05", "0.2")}
    assert black["0.05"]["total"] == black["0.2"]["total"] > 0  # the same boxes at each pad
    assert black["0.05"]["exact"] >= black["0.2"]["exact"]
    assert black["0.05"]["exact"] > 0
    assert sorted(result["van"]["pads"]) == ["0.05", "0.2"]
    assert result["van"]["pads"]["0.05"] == VAN
    assert len(result["van"]["box"]) == 4

    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| pad | original black | original silver | van text |")
    assert table[2].startswith("| 0.05 (default) |")
    assert table[3].startswith("| 0.2 |")
