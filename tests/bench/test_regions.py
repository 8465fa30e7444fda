"""bench/regions.py: its summary of the runs, and the suite's D rows it makes."""

from __future__ import annotations

from typing import Any

from bench.regions import _summary, figure, report


def _rows(texts_regions: list[list[tuple[str, str]]]) -> dict[str, dict[str, list[Any]]]:
    same = [("cam0", "O567AM76"), ("cam1", "Y836XH76")]

    def path(fps: list[float], whole: int, windows: int, texts: list[Any]) -> dict[str, list]:
        return {
            "frames_per_s": fps,
            "frames": [120] * 3,
            "service_cpu_s": [1.2] * 3,
            "triton_cpu_s": [30.0] * 3,
            "detector": [whole] * 3,
            "detector_region": [windows] * 3,
            "event_texts": texts,
        }

    return {
        "whole": path([8.0, 8.2, 7.9], 120, 0, [same] * 3),
        "regions": path([14.0, 13.5, 14.2], 20, 150, texts_regions),
    }


def test_the_d_row_is_regions_over_whole_frames_and_needs_the_same_texts() -> None:
    same = [("cam0", "O567AM76"), ("cam1", "Y836XH76")]
    summary = _summary(_rows([same, list(reversed(same)), same]))
    assert summary["runs_with_other_texts"] == {"whole": 0, "regions": 0}  # order is no matter
    assert abs(summary["speedup"] - 14.0 / 8.0) < 1e-9
    regions = summary["paths"]["regions"]
    assert abs(regions["windows_per_frame"] - 150 / 120) < 1e-9
    assert abs(regions["whole_frame_detections_per_frame"] - 20 / 120) < 1e-9
    result = {"kinds": {"busy": summary}, "cameras": 2, "copies": 3}
    row = figure(result, "python -m bench.regions", "busy")
    assert row.key == "D-busy" and row.a == [14.0, 13.5, 14.2] and row.b == [8.0, 8.2, 7.9]
    assert row.verdict == "PASS"
    assert "| busy | regions | 14.00 |" in report(result)

    missed = _summary(_rows([same, [("cam0", "O567AM76")], same]))
    assert missed["runs_with_other_texts"] == {"whole": 0, "regions": 1}
    row = figure({"kinds": {"busy": missed}, "cameras": 2, "copies": 3}, "cmd", "busy")
    assert row.verdict == "MISS" and row.failed_checks == ["event texts differ in 1 run(s)"]
