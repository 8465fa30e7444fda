"""The capacity phases (O, M, C, R) on recorded measurements: windows, figures, verdicts, text.

Nothing here measures: worker results are written out by hand (the shape bench/service_run.py
writes), so that what each figure is computed from, its target and its verdict are checked
exactly. A real run is in test_capacity_run.py.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bench import (
    camera_mix,
    capacity,
    clips,
    motion_gate,
    report,
    report_capacity,
    run_all,
    runtime_rows,
    seed_client,
)
from bench.clips import TRUE_TEXTS
from bench.common import Figure, source_clip
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
    captures: list[tuple[float, float]] | None = None,
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
        "captures": captures if captures is not None else [],
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


def _step(
    cameras: int, fps: float, per_camera: list[int], p99: float, round_: int = 0
) -> dict[str, Any]:
    rates = [n / 15 for n in per_camera]
    latencies = [(START + 6 + i * 0.1, p99) for i in range(5)]
    captures = [(START + 6 + i * 0.1, p99 + 0.5) for i in range(5)]
    result = worker_result(cameras=cameras, rates=rates, latencies=latencies, captures=captures)
    summary = summarize_run(result, 5, TRUE_TEXTS)
    assert summary["answered_fps"] == pytest.approx(fps, rel=0.05)
    summary["round"] = round_
    return summary


def _reference(rate: float, latencies: list[tuple[float, float]] | None, round_: int) -> Any:
    result = worker_result(cameras=1, rates=[rate], latencies=latencies)
    return summarize_run(result, 5, TRUE_TEXTS) | {"round": round_}


def _ladder(rounds: int = 3) -> tuple[list[Any], list[Any], list[list[dict[str, Any]]]]:
    """Per-round summaries: the references and three steps, ``rounds`` rounds alike."""
    saturated = [_reference(6.0, None, r) for r in range(rounds)]
    unloaded = [_reference(3.0, [(START + 6, 0.25), (START + 7, 0.35)], r) for r in range(rounds)]
    steps = [
        # below saturation: all 5 offered frames/s answered
        [_step(1, 5.0, [75], 0.5, r) for r in range(rounds)],
        # saturated, even, p99 3x the unloaded 0.3 s
        [_step(2, 6.0, [45, 45], 0.9, r) for r in range(rounds)],
        # below 0.9 x saturation, uneven
        [_step(4, 4.0, [30, 15, 8, 7], 0.4, r) for r in range(rounds)],
    ]
    return saturated, unloaded, steps


def test_the_ladder_bound_is_the_offered_rate_below_saturation_and_saturation_above() -> None:
    assert capacity.bound(1, 6.0) == 5.0
    assert capacity.bound(2, 6.0) == 6.0
    figures = {f.key: f for f in capacity.ladder_figures(*_ladder())}
    assert figures["O-saturated"].a == [pytest.approx(6.0)] * 3
    assert figures["O-unloaded"].a == [pytest.approx(0.3)] * 3
    assert figures["O1-rate"].b == [5.0] * 3 and figures["O1-rate"].verdict == "PASS"
    assert figures["O2-rate"].b == [pytest.approx(6.0)] * 3
    assert figures["O2-rate"].verdict == "PASS"
    assert figures["O4-rate"].ratio == pytest.approx(4.0 / 6.0, rel=0.05)
    assert figures["O4-rate"].verdict == "MISS"
    assert "O1-share" not in figures  # one camera has no share
    assert figures["O2-share"].verdict == "PASS"
    assert figures["O4-share"].a == [7.0] * 3 and figures["O4-share"].b == [30.0] * 3
    assert figures["O4-share"].verdict == "MISS"
    assert figures["O1-p99"].verdict == "PASS"
    assert figures["O2-p99"].ratio == pytest.approx(3.0)
    assert figures["O2-p99"].verdict == "MISS"
    assert {figures[f"O{n}-rss"].verdict for n in (1, 2, 4)} == {"PASS"}
    assert figures["O-wrong-text"].verdict == "info"
    for figure in figures.values():  # what the JSON keeps gives the same verdict back
        assert Figure.from_dict(json.loads(json.dumps(figure.as_dict()))).verdict == figure.verdict


def test_each_step_is_measured_against_the_references_of_its_own_round() -> None:
    saturated, unloaded, steps = _ladder()
    saturated[1] = _reference(3.0, None, 1)  # round 2 ran while the machine was busier
    figures = {f.key: f for f in capacity.ladder_figures(saturated, unloaded, steps)}
    # round 2's bound is its own saturated rate, the others' theirs
    assert figures["O2-rate"].b == [pytest.approx(6.0), pytest.approx(3.0), pytest.approx(6.0)]
    assert figures["O2-rate"].round_ratios == pytest.approx([1.0, 2.0, 1.0], rel=0.05)


def test_the_ladder_reports_p99_from_capture_to_answer_beside_time_at_triton() -> None:
    saturated, unloaded, steps = _ladder()
    assert steps[1][0]["capture_p99_s"] == pytest.approx(1.4)  # 0.9 at Triton + 0.5 before
    figures = {f.key: f for f in capacity.ladder_figures(saturated, unloaded, steps)}
    capture = figures["O2-capture"]
    assert capture.a == [pytest.approx(1.4)] * 3 and capture.verdict == "info"
    assert figures["O2-p99"].a == [pytest.approx(0.9)] * 3
    doc = report.document(_meta(), list(figures.values()), "")
    row = next(line for line in doc.splitlines() if line.startswith("| 2 | 10 |"))
    cells = [c.strip() for c in row.split("|")]
    header = next(line for line in doc.splitlines() if line.startswith("| cameras |"))
    column = [c.strip() for c in header.split("|")].index("p99 capture to answer (s)")
    assert cells[column] == "1.40"


def test_the_ladder_interleaves_its_steps_over_at_least_three_rounds() -> None:
    ladder = (1, 2, 4, 8, 16)
    rounds = capacity.schedule(ladder, 1)  # fewer asked: the minimum
    assert len(rounds) == capacity.MIN_ROUNDS == 3
    runs = {"saturated", "unloaded", "1", "2", "4", "8", "16"}
    for order in rounds:  # every round runs every step and both references once
        assert sorted(order) == sorted(runs) and len(order) == len(runs)
    # interleaved: the order changes from round to round, no run keeps its place
    assert len({tuple(order) for order in rounds}) == 3
    for name in runs:
        assert len({order.index(name) for order in rounds}) == 3
    assert len(capacity.schedule(ladder, 5)) == 5


def test_every_camera_of_a_step_plays_the_clip_from_a_different_offset(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert clips.offsets(120, 16) == sorted(set(clips.offsets(120, 16)))  # all different
    assert clips.offsets(120, 2) == [0, 60]
    made: list[int] = []

    def rotated(source: Path, offset: int, out: Path) -> Path:
        made.append(offset)
        return out

    monkeypatch.setattr(clips, "count_frames", lambda path: 120)
    monkeypatch.setattr(clips, "rotated_clip", rotated)
    by_step = clips.ladder_clips(Path("yard.ts"), (1, 2, 4), tmp_path)
    for n in (1, 2, 4):
        assert len(by_step[n]) == n and len(set(by_step[n])) == n
    assert by_step[0] == by_step[1] == [tmp_path / "o-offset-0.ts"]  # the references' clip
    assert sorted(made) == [0, 30, 60, 90]  # each offset encoded once, whichever step uses it


def test_rss_growth_over_five_percent_misses() -> None:
    step = summarize_run(worker_result(cameras=1, rss_step=5.0), 5, TRUE_TEXTS) | {"round": 0}
    rss = next(f for f in capacity.step_figures([step], [6.0], [0.3]) if f.key == "O1-rss")
    assert rss.ratio == pytest.approx(((500 + 5 * 19) / (500 + 5 * 6)), rel=0.01)
    assert rss.verdict == "MISS"


def test_memory_per_camera_is_what_each_camera_beyond_the_first_adds() -> None:
    """(RSS at N - RSS at 1) / (N - 1), round by round, against 40 MiB per camera."""
    saturated, unloaded, steps = _ladder()
    for runs in steps:
        for run in runs:  # each camera beyond the first adds 30 MiB; round 1 adds 50
            per_camera = 50.0 if run["round"] == 1 else 30.0
            run["rss_end_mib"] = [300.0 + per_camera * (run["cameras"] - 1)] * 3
    figures = {f.key: f for f in capacity.ladder_figures(saturated, unloaded, steps)}
    memory = figures["O4-rss-per-camera"]
    assert memory.a == [pytest.approx(30.0), pytest.approx(50.0), pytest.approx(30.0)]
    assert memory.ratio == pytest.approx(30.0 / 40.0) and memory.verdict == "PASS"
    for runs in steps:
        for run in runs:
            run["rss_end_mib"] = [300.0 + 45.0 * (run["cameras"] - 1)] * 3
    figures = {f.key: f for f in capacity.ladder_figures(saturated, unloaded, steps)}
    assert figures["O4-rss-per-camera"].verdict == "MISS"
    assert report_capacity.family("O4-rss-per-camera") == "O-rss-per-camera"
    assert "O-rss-per-camera" in report_capacity.PLANS
    # without a 1-camera step there is nothing to measure against
    assert "O4-rss-per-camera" not in {
        f.key for f in capacity.ladder_figures(saturated, unloaded, steps[1:])
    }


def test_a_missed_ladder_step_gets_its_familys_profile_and_plan() -> None:
    figures = capacity.ladder_figures(*_ladder())
    assert report_capacity.family("O16-triton-rss") == "O-triton-rss"
    assert report_capacity.family("R-openvino-bf16") == "R"
    assert report_capacity.family("C-busy-kept-up") == "C-kept-up"
    assert report_capacity.family("P1") == "P1"
    miss = next(f for f in figures if f.key == "O4-rate")
    target = report_capacity.profile_target(miss, quick=False)
    assert target == ("service", "--realtime", "--cameras", "4", "--seconds", "30")
    mix = {f.key: f for f in camera_mix.mix_figures(_mix_summary(3, 1.0))}
    assert report_capacity.profile_target(mix["C-mix-kept-up"], quick=True) == (
        *("service", "--realtime", "--motion", "--cameras", "3", "--seconds", "10"),
    )
    busy = {f.key: f for f in camera_mix.mix_figures(_mix_summary(1, 1.0, kind="busy"))}
    assert report_capacity.profile_target(busy["C-busy-kept-up"], quick=True) == (
        *("service", "--realtime", "--cameras", "1", "--seconds", "10"),
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
    figures = [
        *capacity.ladder_figures(*_ladder()),
        *motion_gate.motion_figures(_motion_runs(["A", "B"], ["A", "B"]), 720, 20),
        *camera_mix.mix_figures(_mix_summary(cameras=1, lost=0.0, kind="busy")),
        *camera_mix.mix_figures(_mix_summary(cameras=3, lost=0.0)),
        *runtime_rows.runtime_figures(_runtime_rows()),
    ]
    doc = report.document(_meta(), figures, report.table(figures))
    notes = doc.split("## Where the time goes", 1)[1]
    assert "- **O**, the overload ladder: saturated 1-camera rate 6.00" in notes
    assert "- **M**, motion gating: 0.20 of the detector calls" in notes
    assert "are the same texts" in notes
    # cameras per core, each kind of camera apart: 1 busy camera on 1.5 cores, 3 mixed ones
    assert "a camera the gate cannot skip (every sampled frame to the detector): 0.67" in notes
    assert "a realistic mix (a vehicle in view 20 % of the time, motion gating on): 2.00" in notes
    assert "- **R**" in notes and "openvino 1.50x" in notes
    assert "openvino-bf16 0.75x (texts differ: MISS)" in notes
    assert "(~45 min)" in doc and "O runs 1, 2, 4, 8, 16 real-time cameras" in doc
    assert "3 rounds, the order rotated each round" in doc
    quick = report.document(_meta(quick=True), figures, report.table(figures))
    assert "about 45 minutes" in quick


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
    # gating is an option: fewer calls with other texts is no PASS
    assert differ["M"].ratio == pytest.approx(0.2)
    assert differ["M"].verdict == "MISS"


def _mix_summary(cameras: int, lost: float, kind: str = "mix") -> dict[str, Any]:
    skipped = 4.0 if kind == "mix" else 0.0
    result = worker_result(cameras=cameras, rates=[1.0] * cameras, skipped=skipped, lost=lost)
    summary = summarize_run(result, 5, TRUE_TEXTS)
    share = 0.2 if kind == "mix" else 1.0
    summary.update(kind=kind, vehicle_share=share, saturated_fps=6.0, chosen_by="test")
    return summary


def test_cameras_per_core_when_every_camera_kept_up() -> None:
    figures = {f.key: f for f in camera_mix.mix_figures(_mix_summary(cameras=3, lost=0.0))}
    # 15 s window: 7.5 s service + 15 s Triton CPU = 1.5 cores busy for 3 cameras
    assert figures["C-mix"].ratio == pytest.approx(3 / 1.5)
    assert figures["C-mix"].extra["cpu_ms_per_camera_s"] == pytest.approx(1e3 * 22.5 / 45)
    assert figures["C-mix-kept-up"].verdict == "PASS"
    assert figures["C-mix-gate"].ratio == pytest.approx(1 / 5, rel=0.05)


def test_cameras_the_gate_cannot_skip_are_reported_apart_from_the_mix() -> None:
    busy = {f.key: f for f in camera_mix.mix_figures(_mix_summary(1, 0.0, "busy"))}
    assert set(busy) == {"C-busy", "C-busy-kept-up"}  # no gate: every frame was inferred
    # the same 1.5 cores busy, for one camera: 0.67 cameras per core, not the mix's 2
    assert busy["C-busy"].ratio == pytest.approx(1 / 1.5)
    assert "motion gating off" in busy["C-busy"].notes[0]
    mix = {f.key: f for f in camera_mix.mix_figures(_mix_summary(cameras=3, lost=0.0))}
    assert mix["C-mix"].ratio == pytest.approx(2.0)


def test_no_cameras_per_core_figure_when_a_camera_fell_behind() -> None:
    figures = {f.key: f for f in camera_mix.mix_figures(_mix_summary(cameras=2, lost=1.0))}
    assert figures["C-mix-kept-up"].ratio == pytest.approx(0.5)
    assert figures["C-mix-kept-up"].verdict == "MISS"
    assert figures["C-mix"].verdict == "n/a"
    assert any("NOT KEPT UP" in note for note in figures["C-mix"].notes)


def test_the_mix_is_sized_below_saturation() -> None:
    assert camera_mix.cameras_for(7, 0.2, 6.0) == 7  # --mix-cameras
    assert camera_mix.cameras_for(0, 0.2, 6.2) == 3  # 0.6 x 6.2 / (5 x 0.2)
    assert camera_mix.cameras_for(0, 0.2, 1000.0) == camera_mix.MAX_CAMERAS
    assert camera_mix.cameras_for(0, 0.2, None) >= 1
    # cameras the gate cannot skip bring detector work with every frame: fewer of them
    assert camera_mix.cameras_for(0, 1.0, 12.0) == 1  # 0.6 x 12 / 5
    assert camera_mix.cameras_for(0, 1.0, None, per_core=0) == 1


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


def test_a_faster_runtime_whose_texts_differ_is_a_miss() -> None:
    baseline = {"variant": "torchscript", "frames_per_s": [4.0, 4.0, 4.0]}
    faster = {"frames_per_s": [8.0, 8.0, 8.0], "frames": 60}
    rows = [
        baseline,
        {**faster, "variant": "same", "texts_identical": True},
        {**faster, "variant": "differ", "texts_identical": False},
        {**faster, "variant": "unchecked"},
    ]
    figures = {f.key: f for f in runtime_rows.runtime_figures(rows)}
    assert [f.ratio for f in figures.values()] == [pytest.approx(2.0)] * 3  # all twice as fast
    assert figures["R-same"].verdict == "PASS"
    assert figures["R-differ"].verdict == "MISS"
    assert figures["R-unchecked"].verdict == "MISS"  # not compared: not shown to match
    rows[2]["frames_with_other_texts"] = [3, 17]
    differ = runtime_rows.runtime_figures(rows)[1]
    assert differ.failed_checks == ["texts DIFFER from TorchScript's on 2 of 60 frames"]
    # the table says why, and the verdict survives the JSON
    assert "**MISS** (texts DIFFER from TorchScript's on 2 of 60 frames)" in report.table([differ])
    assert Figure.from_dict(json.loads(json.dumps(differ.as_dict()))).verdict == "MISS"


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
    # the full ladder, every round, warm-ups included, stays within 15 minutes of worker time
    assert full.ladder_rounds >= capacity.MIN_ROUNDS
    per_round = 2 * full.ref_s + len(full.ladder) * full.ladder_step_s
    assert full.ladder_rounds * per_round <= 15 * 60
    assert set(run_all.PHASES) >= {"O", "M", "C", "R"}
    for bad in (["--ladder", "0,2"], ["--mix-cameras", "-1"], ["--only", "X"]):
        with pytest.raises(SystemExit):
            run_all.parse_args(bad)


def test_service_configs_keep_the_motion_gate_off_unless_asked(tmp_path: Path) -> None:
    """Every frame sent and detected whole (phase D measures the regions), unless asked."""
    import yaml

    spec = ServiceSpec([Path("a.ts")], "127.0.0.1:1", 5.0)
    config = yaml.safe_load(write_config(spec, tmp_path / "off").read_text())
    assert config["cameras"][0]["motion"] == {"enabled": False, "regions": False}
    spec.camera_extra = {"motion": {"enabled": True}}
    config = yaml.safe_load(write_config(spec, tmp_path / "on").read_text())
    assert config["cameras"][0]["motion"] == {"enabled": True}


def _params(instances: int) -> Any:
    from bench.params import PipelineParams

    return PipelineParams(
        input_hw=(64, 64),
        head_layout="auto",
        conf_threshold=0.25,
        iou_threshold=0.45,
        max_plates=16,
        crop_pad_ratio=0.2,
        recogniser_max_batch=32,
        torch_threads={"detector": 1, "stn": 1, "lprnet": 1},
        instances={"detector": instances, "stn": 1, "lprnet": 1},
    )


def test_the_seed_client_keeps_a_request_in_flight_for_every_instance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert seed_client.seed_workers(_params(2), 1) == 2
    assert seed_client.seed_workers(_params(2), 4) == 1
    assert seed_client.seed_workers(_params(1), 1) == 1
    assert seed_client.seed_workers(_params(3), 2) == 2
    busy, most = [0], [0]
    lock = threading.Lock()

    class FakeClient:
        """Synchronous as the real one: each call holds its thread until it is answered."""

        def __init__(self, url: str, params: Any) -> None:
            pass

        def recognise(self, image: Any, stage_s: dict[str, float]) -> list[str]:
            with lock:
                busy[0] += 1
                most[0] = max(most[0], busy[0])
            time.sleep(0.02)
            with lock:
                busy[0] -= 1
            return ["A"]

        def close(self) -> None:
            pass

    monkeypatch.setattr(seed_client, "SeedClient", FakeClient)
    result = seed_client.run_seed("fake:1", _params(2), [source_clip()], 5.0)
    assert result["errors"] == []
    assert result["workers_per_camera"] == 2 and result["in_flight"] == 2
    assert most[0] == 2  # both detector instances had a request at once
    assert result["frames"] == result["plates"] == 40  # every sampled frame, once (8 s at 5 fps)
