"""The capacity phases (O, M, C, R) on recorded measurements: windows, figures, verdicts, text.

Nothing here measures: worker results are written out by hand (the shape bench/service_run.py
writes), so that what each figure is computed from, its target and its verdict are checked
exactly. A real run is in test_capacity_run.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import camera_mix, capacity, motion_gate, report, report_capacity, run_all, runtime_rows
from bench.clips import TRUE_TEXTS
from bench.common import Figure
from bench.service_run import ServiceSpec, write_config
from bench.timeline import COUNTERS, summarize_run, window

START = 1000.0


def worker_result(
    *,
    cameras: int = 2,
    seconds: int = 20,
    rates: list[float] | None = None,
    rss_step: float = 0.0,
    latencies: list[tuple[float, float]] | None = None,
    events: list[tuple[float, str, str]] | None = None,
    skipped: float = 0.0,
    lost: float = 0.0,
) -> dict[str, Any]:
    """A worker's JSON: one sample a second; camera i answers ``rates[i]`` frames a second."""
    rates = rates or [5.0] * cameras
    timeline = []
    for i in range(seconds + 1):
        counts = {}
        for c, rate in enumerate(rates):
            n = int(rate * i)
            counts[f"cam{c}"] = dict.fromkeys(COUNTERS, 0) | {
                "answered": n,
                "sent": n,
                "sampled": n + int(lost * i),
                "superseded": int(lost * i),
                "decoded": 3 * n,
                "skipped_no_motion": int(skipped * i),
            }
        timeline.append(
            {
                "t": START + i,
                "rss_mib": 500.0 + rss_step * i,
                "triton_rss_mib": 2000.0,
                "cpu_s": 0.5 * i,
                "triton_cpu_s": 1.0 * i,
                "window_limit": 2,
                "recognizer": {"timed_out": 0, "late": i // 10, "resets": 0},
                "cameras": counts,
            }
        )
    return {
        "started_monotonic": START,
        "stop_monotonic": START + seconds,
        "timeline": timeline,
        "latencies": latencies
        if latencies is not None
        else [(START + 5 + i, 0.3) for i in range(10)],
        "event_log": [(t, c, text, "track_end") for t, c, text in events or []],
        "camera_errors": [],
    }


def test_the_window_leaves_the_warm_up_out_and_differences_two_samples() -> None:
    result = worker_result(cameras=2, seconds=20, rates=[4.0, 2.0])
    win = window(result, warmup_s=5)
    assert (win.t0, win.t1) == (START + 5, START + 20)
    assert win.per_camera("answered") == {"cam0": 60, "cam1": 30}
    assert win.delta("cpu_s") == pytest.approx(7.5)
    assert win.recognizer("late") == 2 - 0


def test_a_run_summary_counts_only_what_happened_after_the_warm_up() -> None:
    events = [
        (START + 2, "cam0", "O567AM76"),
        (START + 8, "cam0", "O567AM7"),
        (START + 9, "cam1", "Y836XH76"),
    ]
    latencies = [(START + 1, 9.0), (START + 6, 0.2), (START + 7, 0.4), (START + 30, 5.0)]
    result = worker_result(rates=[4.0, 2.0], events=events, latencies=latencies, rss_step=1.0)
    summary = summarize_run(result, 5.0, TRUE_TEXTS)
    assert summary["answered_fps"] == pytest.approx(90 / 15)
    assert summary["answered_per_camera"] == {"cam0": 60, "cam1": 30}
    assert summary["per_camera"]["cam1"]["sent"] == 30
    # the 9 s answer came during the warm-up and the 5 s one after the stop: neither counts
    assert summary["latencies"] == 2
    assert summary["latency_p99_s"] == pytest.approx(0.398)
    assert summary["events"] == 2 and summary["wrong_text_events"] == 1
    assert summary["service_cpu_s"] == pytest.approx(7.5)
    # RSS edges: the first and last 15 % of the 15 s window (t <= 2.25 s, t >= 12.75 s)
    assert summary["rss_start_mib"] == [505.0, 506.0, 507.0]
    assert summary["rss_end_mib"] == [518.0, 519.0, 520.0]


def _step(cameras: int, fps: float, per_camera: list[int], p99: float) -> dict[str, Any]:
    rates = [n / 15 for n in per_camera]
    latencies = [(START + 6 + i * 0.1, p99) for i in range(5)]
    summary = summarize_run(
        worker_result(cameras=cameras, rates=rates, latencies=latencies), 5, TRUE_TEXTS
    )
    assert summary["answered_fps"] == pytest.approx(fps, rel=0.05)
    return summary


def _ladder() -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    saturated = summarize_run(worker_result(cameras=1, rates=[6.0]), 5, TRUE_TEXTS)
    unloaded = summarize_run(
        worker_result(cameras=1, rates=[3.0], latencies=[(START + 6, 0.25), (START + 7, 0.35)]),
        5,
        TRUE_TEXTS,
    )
    steps = [
        _step(1, 5.0, [75], 0.5),  # below saturation: all 5 offered frames/s answered
        _step(2, 6.0, [45, 45], 0.9),  # saturated, even, p99 3x the unloaded 0.3 s
        _step(4, 4.0, [30, 15, 8, 7], 0.4),  # below 0.9 x saturation, uneven
    ]
    return saturated, unloaded, steps


def test_the_ladder_bound_is_the_offered_rate_below_saturation_and_saturation_above() -> None:
    assert capacity.bound(1, 6.0) == 5.0
    assert capacity.bound(2, 6.0) == 6.0
    figures = {f.key: f for f in capacity.ladder_figures(*_ladder())}
    assert figures["O-saturated"].a == [pytest.approx(6.0)]
    assert figures["O-unloaded"].a == [pytest.approx(0.3)]
    assert figures["O1-rate"].b == [5.0] and figures["O1-rate"].verdict == "PASS"
    assert figures["O2-rate"].b == [pytest.approx(6.0)] and figures["O2-rate"].verdict == "PASS"
    assert figures["O4-rate"].ratio == pytest.approx(4.0 / 6.0, rel=0.05)
    assert figures["O4-rate"].verdict == "MISS"
    assert "O1-share" not in figures  # one camera has no share
    assert figures["O2-share"].verdict == "PASS"
    assert figures["O4-share"].a == [7.0] and figures["O4-share"].b == [30.0]
    assert figures["O4-share"].verdict == "MISS"
    assert figures["O1-p99"].verdict == "PASS"
    assert figures["O2-p99"].ratio == pytest.approx(3.0)
    assert figures["O2-p99"].verdict == "MISS"
    assert {figures[f"O{n}-rss"].verdict for n in (1, 2, 4)} == {"PASS"}
    assert figures["O-wrong-text"].verdict == "info"
    for figure in figures.values():  # what the JSON keeps gives the same verdict back
        assert Figure.from_dict(json.loads(json.dumps(figure.as_dict()))).verdict == figure.verdict


def test_rss_growth_over_five_percent_misses() -> None:
    step = summarize_run(worker_result(cameras=1, rss_step=5.0), 5, TRUE_TEXTS)
    rss = next(f for f in capacity.step_figures(step, 6.0, 0.3) if f.key == "O1-rss")
    assert rss.ratio == pytest.approx(((500 + 5 * 19) / (500 + 5 * 6)), rel=0.01)
    assert rss.verdict == "MISS"


def test_a_missed_ladder_step_gets_its_familys_profile_and_plan() -> None:
    figures = capacity.ladder_figures(*_ladder())
    assert report_capacity.family("O16-triton-rss") == "O-triton-rss"
    assert report_capacity.family("R-openvino-bf16") == "R"
    assert report_capacity.family("P1") == "P1"
    miss = next(f for f in figures if f.key == "O4-rate")
    target = report_capacity.profile_target(miss, quick=False)
    assert target == ("service", "--realtime", "--cameras", "4", "--seconds", "30")
    kept_up = next(f for f in camera_mix.mix_figures(_mix_summary(3, 1.0)) if f.key == "C-kept-up")
    assert report_capacity.profile_target(kept_up, quick=True) == (
        *("service", "--realtime", "--motion", "--cameras", "3", "--seconds", "10"),
    )
    assert report_capacity.profile_target(figures[0], quick=False) is None  # O-saturated
    doc = report.document(_meta(), figures, report.table(figures))
    section = doc.split("## Targets missed: profile and plan", 1)[1]
    assert "### O4-rate:" in section and "### O2-p99:" in section
    assert "bench.profile service --realtime" in section
    assert section.count("Plan:") == 3  # O2-p99, O4-rate, O4-share
    assert "substream" in section  # the rate plan names its next lever
    # the ladder's own table, one row per step
    rows = [line for line in doc.splitlines() if line.startswith("| 4 | 20 |")]
    assert len(rows) == 1 and "0.23" in rows[0]  # share 7 / 30


def _meta(quick: bool = False) -> dict[str, Any]:
    plan = run_all.make_plan(run_all.parse_args(["--quick"] if quick else []))
    full = run_all.make_plan(run_all.parse_args([]))
    return {
        "plan": plan.__dict__,
        "full_plan": full.__dict__,
        "command": "python -m bench",
        "started_at": "now",
        "nproc": 2,
        "cpu_model": "cpu",
        "memory_gib": 1,
        "loadavg_at_start": [0, 0, 0],
        "git_commit": "x",
        "python": "3",
        "pyav": "1",
        "ffmpeg": "f",
        "tritonclient": "t",
    }


def test_the_document_describes_every_capacity_phase() -> None:
    mix = _mix_summary(cameras=3, lost=0.0)
    figures = [
        *capacity.ladder_figures(*_ladder()),
        *motion_gate.motion_figures(_motion_runs(["A", "B"], ["A", "B"]), 720, 20),
        *camera_mix.mix_figures(mix),
        *runtime_rows.runtime_figures(_runtime_rows()),
    ]
    doc = report.document(_meta(), figures, report.table(figures))
    notes = doc.split("## Where the time goes", 1)[1]
    assert "- **O**, the overload ladder: saturated 1-camera rate 6.00" in notes
    assert "- **M**, motion gating: 0.20 of the detector calls" in notes
    assert "are the same texts" in notes
    assert "- **C**" in notes and "cameras per core" in notes
    assert "- **R**" in notes and "openvino 1.50x" in notes
    assert "(~40 min)" in doc and "O runs 1, 2, 4, 8, 16 real-time cameras" in doc
    quick = report.document(_meta(quick=True), figures, report.table(figures))
    assert "about 40 minutes" in quick


def _motion_runs(gated: list[str], ungated: list[str]) -> dict[str, list[dict[str, Any]]]:
    return {
        "gated": [{"round": 0, "sent": 48, "skipped_no_motion": 192, "texts": gated}],
        "ungated": [{"round": 0, "sent": 240, "skipped_no_motion": 0, "texts": ungated}],
    }


def test_motion_gating_counts_detector_calls_and_compares_event_texts() -> None:
    figures = {
        f.key: f for f in motion_gate.motion_figures(_motion_runs(["A", "B"], ["B", "A"]), 720, 20)
    }
    assert figures["M"].ratio == pytest.approx(0.2)
    assert figures["M"].verdict == "PASS"
    assert figures["M-events"].verdict == "PASS"
    differ = {
        f.key: f for f in motion_gate.motion_figures(_motion_runs(["A"], ["A", "B"]), 720, 20)
    }
    assert differ["M-events"].verdict == "MISS"
    assert differ["M-events"].extra["identical"] is False
    assert "gated ['A'], ungated ['A', 'B']" in differ["M-events"].notes[0]


def _mix_summary(cameras: int, lost: float) -> dict[str, Any]:
    result = worker_result(cameras=cameras, rates=[1.0] * cameras, skipped=4.0, lost=lost)
    summary = summarize_run(result, 5, TRUE_TEXTS)
    summary.update(vehicle_share=0.2, saturated_fps=6.0, chosen_by="test")
    return summary


def test_cameras_per_core_when_every_camera_kept_up() -> None:
    figures = {f.key: f for f in camera_mix.mix_figures(_mix_summary(cameras=3, lost=0.0))}
    # 15 s window: 7.5 s service + 15 s Triton CPU = 1.5 cores busy for 3 cameras
    assert figures["C"].ratio == pytest.approx(3 / 1.5)
    assert figures["C"].extra["cpu_ms_per_camera_s"] == pytest.approx(1e3 * 22.5 / 45)
    assert figures["C-kept-up"].verdict == "PASS"
    assert figures["C-gate"].ratio == pytest.approx(1 / 5, rel=0.05)


def test_no_cameras_per_core_figure_when_a_camera_fell_behind() -> None:
    figures = {f.key: f for f in camera_mix.mix_figures(_mix_summary(cameras=2, lost=1.0))}
    assert figures["C-kept-up"].ratio == pytest.approx(0.5)
    assert figures["C-kept-up"].verdict == "MISS"
    assert figures["C"].verdict == "n/a"
    assert any("NOT KEPT UP" in note for note in figures["C"].notes)


def test_the_mix_is_sized_below_saturation() -> None:
    assert camera_mix.cameras_for(7, 0.2, 6.0) == 7  # --mix-cameras
    assert camera_mix.cameras_for(0, 0.2, 6.2) == 3  # 0.6 x 6.2 / (5 x 0.2)
    assert camera_mix.cameras_for(0, 0.2, 1000.0) == camera_mix.MAX_CAMERAS
    assert camera_mix.cameras_for(0, 0.2, None) >= 1


def _runtime_rows() -> list[dict[str, Any]]:
    return [
        {"variant": "torchscript", "frames_per_s": {"samples": [4.0, 4.2, 3.8]}},
        {
            "variant": "openvino",
            "frames_per_s": [6.0, 6.3, 5.7],
            "texts_identical": True,
            "min_box_iou": 0.999,
            "server_cpu_ms_per_frame": {"all": {"median": 300.0}},
        },
        {"variant": "openvino-bf16", "frames_per_s": [3.0, 3.0, 3.0], "texts_identical": False},
    ]


def test_runtime_rows_become_figures_against_torchscript() -> None:
    figures = {f.key: f for f in runtime_rows.runtime_figures(_runtime_rows())}
    assert set(figures) == {"R-openvino", "R-openvino-bf16"}
    assert figures["R-openvino"].ratio == pytest.approx(1.5)
    assert figures["R-openvino"].round_ratios == pytest.approx([1.5, 1.5, 1.5])
    assert figures["R-openvino"].verdict == "PASS"
    assert figures["R-openvino-bf16"].verdict == "MISS"
    assert any("DIFFER" in note for note in figures["R-openvino-bf16"].notes)
    missing = runtime_rows.runtime_figures([{"variant": "openvino", "frames_per_s": [1.0]}])
    assert [f.verdict for f in missing] == ["n/a"]


def test_the_runtime_hook_is_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.runtimes

    monkeypatch.delattr(bench.runtimes, runtime_rows.HOOK, raising=False)
    function, why = runtime_rows.hook()
    assert function is None and "suite_rows" in str(why)
    monkeypatch.setattr(bench.runtimes, runtime_rows.HOOK, lambda quick, workdir: [], raising=False)
    function, why = runtime_rows.hook()
    assert callable(function) and why is None


def test_the_new_phases_and_their_options_parse() -> None:
    args = run_all.parse_args(["--only", "o,m", "--ladder", "1,3", "--mix-cameras", "5"])
    assert args.only == ["O", "M"]
    plan = run_all.make_plan(args)
    assert plan.ladder == (1, 3) and plan.mix_cameras == 5
    full = run_all.make_plan(run_all.parse_args([]))
    assert full.ladder == (1, 2, 4, 8, 16)
    # the full ladder, warm-ups included, stays within about 15 minutes of worker time
    assert 2 * full.ref_s + len(full.ladder) * full.ladder_step_s <= 15 * 60
    assert set(run_all.PHASES) >= {"O", "M", "C", "R"}
    for bad in (["--ladder", "0,2"], ["--mix-cameras", "-1"], ["--only", "X"]):
        with pytest.raises(SystemExit):
            run_all.parse_args(bad)


def test_service_configs_keep_the_motion_gate_off_unless_asked(tmp_path: Path) -> None:
    import yaml

    spec = ServiceSpec([Path("a.ts")], "127.0.0.1:1", 5.0)
    config = yaml.safe_load(write_config(spec, tmp_path / "off").read_text())
    assert config["cameras"][0]["motion"] == {"enabled": False}
    spec.camera_extra = {"motion": {"enabled": True}}
    config = yaml.safe_load(write_config(spec, tmp_path / "on").read_text())
    assert config["cameras"][0]["motion"] == {"enabled": True}
