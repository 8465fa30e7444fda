"""Phase O, the overload ladder: N real-time cameras against one Triton, N = 1, 2, 4, 8, 16.

Each step runs the service in its own worker process (bench/timeline.py) for
``plan.ladder_step_s`` seconds on N file cameras looping yard_cam.ts in real time
(``realtime: true``, sample_fps 5, default ``triton`` settings, the motion gate off so that
every sampled frame is offered, ``dedup_window_s: 0`` so that every pass of the looping clip
is an event); the first ``plan.ladder_warmup_s`` seconds are left out. Two references are
measured in the same run, before the ladder:

* the saturated 1-camera rate: one camera looping the clip as fast as possible
  (``realtime: false``: the decode thread waits for the pipeline, nothing is dropped);
* the unloaded service time: the median time at Triton of a frame with nothing else in
  flight (one camera, ``realtime: false``, ``min_in_flight = max_in_flight =
  max_in_flight_per_camera = 1``).

Per step (figures ``O<N>-...``): answered frames/s against ``min(offered 5N, saturated)``
(>= 0.9; below saturation the offered rate is the bound), the per-camera share (answered
frames of the least-served camera / the most-served, >= 0.8), p99 time at Triton / unloaded
(<= 2), RSS growth after the warm-up of the service and of Triton's tree (< 5 %), and
failures; passes whose text (at their last version: a correction replaces what it corrects,
as ``python -m streamer replay`` counts) is not one of the clip's two plates are counted
(``O-wrong-text``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.clips import TRUE_TEXTS
from bench.common import Figure, log
from bench.service_run import ServiceSpec
from bench.timeline import logged, run_worker, sample_interval, summarize_run

if TYPE_CHECKING:
    from bench.run_all import Suite

SAMPLE_FPS = 5.0
RATE_TARGET = 0.9
SHARE_TARGET = 0.8
P99_TARGET = 2.0
RSS_TARGET = 1.05
#: One frame in flight, whatever the window would grow to: the service time of one frame.
UNLOADED = {"min_in_flight": 1, "max_in_flight": 1, "max_in_flight_per_camera": 1}
LOOP_EVENTS = {"dedup_window_s": 0}


def measure(
    suite: Suite,
    name: str,
    clips: list[Path],
    *,
    realtime: bool,
    seconds: float,
    warmup_s: float,
    triton_extra: dict[str, Any] | None = None,
    camera_extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One worker run; its summary, with the compact raw series kept for the JSON."""
    spec = ServiceSpec(
        clips,
        suite.triton.grpc_url,
        SAMPLE_FPS,
        realtime=realtime,
        triton_extra=triton_extra or {},
        events_extra=LOOP_EVENTS,
        camera_extra=camera_extra or {},
    )
    result = run_worker(
        spec,
        suite.workdir / name,
        suite.triton.pid,
        seconds,
        sample_interval(seconds - warmup_s),
    )
    summary = summarize_run(result, warmup_s, TRUE_TEXTS)
    summary["raw"] = compact(result)
    return logged(summary, name)


def compact(result: dict[str, Any]) -> dict[str, Any]:
    """The worker's JSON without its per-camera timeline (the summary has the window's)."""
    begin = float(result["started_monotonic"])
    kept = {
        k: v
        for k, v in result.items()
        if k not in ("timeline", "latencies", "event_log", "event_latency_s")
    }
    kept["series"] = [
        {
            "t": round(s["t"] - begin, 2),
            "rss_mib": round(s["rss_mib"], 1),
            "triton_rss_mib": round(s["triton_rss_mib"], 1),
            "cpu_s": round(s["cpu_s"], 2),
            "triton_cpu_s": round(s["triton_cpu_s"], 2),
            "window_limit": s.get("window_limit"),
            "answered": sum(c["answered"] for c in s["cameras"].values()),
        }
        for s in result.get("timeline", [])
    ]
    latencies = result.get("latencies", [])
    kept["latencies_s"] = [[round(t - begin, 2), round(v, 4)] for t, v in latencies]
    events = result.get("event_log", [])
    kept["event_list"] = [[round(t - begin, 2), camera, text] for t, camera, text, _ in events]
    return kept


def phase_ladder(suite: Suite) -> None:
    plan = suite.plan
    clip = suite.source
    warm = plan.ref_warmup_s
    log(f"O: saturated 1-camera rate ({plan.ref_s:g} s, as fast as possible)")
    saturated = measure(
        suite, "o-saturated", [clip], realtime=False, seconds=plan.ref_s, warmup_s=warm
    )
    log(f"O: unloaded service time ({plan.ref_s:g} s, one frame in flight)")
    unloaded = measure(
        suite,
        "o-unloaded",
        [clip],
        realtime=False,
        seconds=plan.ref_s,
        warmup_s=warm,
        triton_extra=UNLOADED,
    )
    steps = []
    for n in plan.ladder:
        log(f"O: {n} real-time camera(s), {plan.ladder_step_s:g} s")
        steps.append(
            measure(
                suite,
                f"o-{n}",
                [clip] * n,
                realtime=True,
                seconds=plan.ladder_step_s,
                warmup_s=plan.ladder_warmup_s,
            )
        )
    suite.raw["overload_ladder"] = {"saturated": saturated, "unloaded": unloaded, "steps": steps}
    suite.figures.extend(ladder_figures(saturated, unloaded, steps))


def bound(cameras: int, saturated_fps: float) -> float:
    """What N real-time cameras at 5 fps can get answered: what they offer, or saturation."""
    return min(SAMPLE_FPS * cameras, saturated_fps)


def _failures(step: dict[str, Any]) -> str:
    return (
        f"failed {step['failed']} (deadline: {step['timed_out']} callers timed out, "
        f"{step['late']} answers late), stream resets {step['resets']}, dropped by the "
        f"queues {step['dropped']}, superseded {step['superseded']}"
    )


def ladder_figures(
    saturated: dict[str, Any], unloaded: dict[str, Any], steps: list[dict[str, Any]]
) -> list[Figure]:
    """The O figures from the summaries of the reference runs and of the steps."""
    sat_fps = saturated["answered_fps"]
    unloaded_s = unloaded["latency_median_s"]
    figures = [
        Figure(
            key="O-saturated",
            title="reference: saturated 1-camera rate (answered frames/s)",
            numerator="answered frames/s, 1 camera as fast as possible",
            denominator="-",
            unit="frames/s",
            a=[sat_fps],
            b=[],
            target=None,
            higher_is_better=True,
            notes=[
                f"one camera looping the clip, realtime: false, sample_fps {SAMPLE_FPS:g}, "
                f"default triton settings, motion gating off; {saturated['answered']} frames "
                f"answered over the "
                f"{saturated['window_s']:.0f} s after a {saturated['warmup_s']:g} s warm-up; "
                f"p50 at Triton {_s(saturated['latency_p50_s'])}, in-flight window median "
                f"{saturated['window_limit_median']}",
            ],
        ),
        Figure(
            key="O-unloaded",
            title="reference: unloaded service time (s at Triton, one frame in flight)",
            numerator="median time at Triton (s)",
            denominator="-",
            unit="s",
            a=[unloaded_s] if unloaded_s is not None else [],
            b=[],
            target=None,
            higher_is_better=False,
            notes=[
                "one camera, realtime: false, min_in_flight = max_in_flight = "
                "max_in_flight_per_camera = 1: every frame finds Triton idle; time at Triton "
                "= from writing the request to the stream to its answer "
                f"(PlateRecognizer.latency_observers), {unloaded['latencies']} answers, p99 "
                f"{_s(unloaded['latency_p99_s'])}; it answered {unloaded['answered_fps']:.2f} "
                "frames/s",
            ],
        ),
    ]
    for step in steps:
        figures.extend(step_figures(step, sat_fps, unloaded_s))
    wrong = [s["wrong_text_events"] for s in steps]
    events = [s["events"] for s in steps]
    figures.append(
        Figure(
            key="O-wrong-text",
            title="ladder: events whose text is not one of the clip's plates",
            numerator="wrong-text events, all steps",
            denominator="events, all steps",
            unit="events",
            a=[float(sum(wrong))],
            b=[float(sum(events))],
            target=None,
            higher_is_better=False,
            notes=[
                f"true plates {', '.join(sorted(TRUE_TEXTS))}; a pass counts with its last "
                "version (bench/service_run.py's RecordingSink, the rule of "
                "streamer.cli.replay.latest_versions); "
                "per step (cameras: wrong / events): "
                + ", ".join(
                    f"{s['cameras']}: {w} / {e}"
                    for s, w, e in zip(steps, wrong, events, strict=True)
                ),
                "texts seen: " + ", ".join(sorted({t for s in steps for t in s["event_texts"]})),
            ],
            extra={"wrong": wrong, "events": events},
        )
    )
    return figures


def step_figures(step: dict[str, Any], sat_fps: float, unloaded_s: float | None) -> list[Figure]:
    n = step["cameras"]
    cams = f"{n} camera{'s' if n > 1 else ''}"
    limit = bound(n, sat_fps)
    offered = SAMPLE_FPS * n
    common = (
        f"{n} file camera(s) looping the clip in real time, sample_fps {SAMPLE_FPS:g}, "
        f"default triton settings, motion gating off; {step['window_s']:.0f} s measured after a "
        f"{step['warmup_s']:g} s warm-up"
    )
    per_camera = step["answered_per_camera"]
    counts = sorted(per_camera.values())
    figures = [
        Figure(
            key=f"O{n}-rate",
            title=f"overload, {cams}: answered frames/s vs min(offered, saturated)",
            numerator="answered frames/s",
            denominator="min(offered 5N, saturated rate)",
            unit="frames/s",
            a=[step["answered_fps"]],
            b=[limit],
            target=RATE_TARGET,
            higher_is_better=True,
            notes=[
                common,
                f"offered {offered:g} frames/s (queued by the cameras: "
                f"{step['sampled_fps']:.2f}), saturated 1-camera rate {sat_fps:.2f}: the bound "
                + (
                    "is the offered rate (below saturation)"
                    if offered < sat_fps
                    else "is saturation"
                ),
                _failures(step),
                f"in-flight window median {step['window_limit_median']}, max "
                f"{step['window_limit_max']}; events {step['events']}, wrong-text "
                f"{step['wrong_text_events']}",
            ],
            extra={
                "cameras": n,
                "offered_fps": offered,
                "saturated_fps": sat_fps,
                **{
                    k: step[k]
                    for k in (
                        "failed",
                        "late",
                        "timed_out",
                        "resets",
                        "dropped",
                        "window_limit_median",
                        "events",
                        "wrong_text_events",
                    )
                },
            },
        ),
    ]
    if n > 1:
        figures.append(
            Figure(
                key=f"O{n}-share",
                title=f"overload, {cams}: per-camera share, least / most answered",
                numerator="answered frames, least-served camera",
                denominator="answered frames, most-served camera",
                unit="frames",
                a=[float(counts[0])] if counts else [],
                b=[float(counts[-1])] if counts else [],
                target=SHARE_TARGET,
                higher_is_better=True,
                notes=[
                    common,
                    "answered per camera: " + ", ".join(f"{k} {v}" for k, v in per_camera.items()),
                ],
                extra={"answered_per_camera": per_camera},
            )
        )
    p99 = step["latency_p99_s"]
    figures.append(
        Figure(
            key=f"O{n}-p99",
            title=f"overload, {cams}: p99 time at Triton vs unloaded",
            numerator="p99 time at Triton (s)",
            denominator="unloaded median (s)",
            unit="s",
            a=[p99] if p99 is not None else [],
            b=[unloaded_s] if unloaded_s is not None else [],
            target=P99_TARGET,
            higher_is_better=False,
            notes=[
                common,
                f"{step['latencies']} answers, p50 {_s(step['latency_p50_s'])}; time at "
                "Triton = from writing the request to the stream to its answer, late ones "
                "included (frames waiting for a permit are not at Triton)",
            ],
        )
    )
    for key, what, start, end in (
        ("rss", "service RSS", "rss_start_mib", "rss_end_mib"),
        ("triton-rss", "Triton tree RSS", "triton_rss_start_mib", "triton_rss_end_mib"),
    ):
        figures.append(
            Figure(
                key=f"O{n}-{key}",
                title=f"overload, {cams}: {what}, end / after warm-up",
                numerator="RSS, last 15 % (MiB)",
                denominator="RSS, first 15 % (MiB)",
                unit="MiB",
                a=list(step[end]),
                b=list(step[start]),
                target=RSS_TARGET,
                higher_is_better=False,
                notes=[
                    common,
                    "medians of the samples in the first and the last 15 % of the measured "
                    "window"
                    + (
                        " (the service's own process, a fresh one per step)"
                        if key == "rss"
                        else " (tritonserver and its model stubs summed; one server for the "
                        "whole suite)"
                    ),
                ],
            )
        )
    return figures


def _s(value: float | None) -> str:
    return f"{value:.3f} s" if value is not None else "-"
