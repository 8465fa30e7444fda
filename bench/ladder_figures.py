"""Phase O's figures (bench/capacity.py measures): from the per-round summaries of the two
references and of every step of the ladder (bench/timeline.py's ``summarize_run``), pure
functions, tested on recorded results."""

from __future__ import annotations

import statistics
from typing import Any

from bench.clips import TRUE_TEXTS
from bench.common import Figure

SAMPLE_FPS = 5.0
RATE_TARGET = 0.9
SHARE_TARGET = 0.8
P99_TARGET = 2.0
RSS_TARGET = 1.05
#: What one more 1080p camera at 5 fps may add to the service's memory (issue 29): its
#: decoder's pictures (about 27 MiB for H.264 High with B-frames, measured) and the frames
#: it has waiting and in flight.
RSS_PER_CAMERA_BUDGET_MIB = 40.0


def bound(cameras: int, saturated_fps: float) -> float:
    """What N real-time cameras at 5 fps can get answered: what they offer, or saturation."""
    return min(SAMPLE_FPS * cameras, saturated_fps)


def _sum(runs: list[dict[str, Any]], key: str) -> int:
    return sum(int(r[key]) for r in runs)


def _values(runs: list[dict[str, Any]], key: str) -> list[float]:
    """``key`` of every round that has it (a run without answers has no percentiles)."""
    return [float(r[key]) for r in runs if r.get(key) is not None]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _failures(runs: list[dict[str, Any]]) -> str:
    return (
        f"all rounds: failed {_sum(runs, 'failed')} (deadline: {_sum(runs, 'timed_out')} "
        f"callers timed out, {_sum(runs, 'late')} answers late), stream resets "
        f"{_sum(runs, 'resets')}, dropped by the queues {_sum(runs, 'dropped')}, superseded "
        f"{_sum(runs, 'superseded')}"
    )


def ladder_figures(
    saturated: list[dict[str, Any]],
    unloaded: list[dict[str, Any]],
    steps: list[list[dict[str, Any]]],
) -> list[Figure]:
    """The O figures from the per-round summaries of the references and of every step."""
    sat = [float(r["answered_fps"]) for r in saturated]
    unloaded_s = [r["latency_median_s"] for r in unloaded]
    rounds = len(saturated)
    figures = [
        Figure(
            key="O-saturated",
            title="reference: saturated 1-camera rate (answered frames/s)",
            numerator="answered frames/s, 1 camera as fast as possible",
            denominator="-",
            unit="frames/s",
            a=sat,
            b=[],
            target=None,
            higher_is_better=True,
            notes=[
                f"one camera looping the clip, realtime: false, sample_fps {SAMPLE_FPS:g}, "
                f"default triton settings, motion gating off; one run per round ({rounds} "
                f"rounds, interleaved with the steps), each "
                f"{_median(_values(saturated, 'window_s')) or 0:.0f} s after a "
                f"{saturated[0]['warmup_s'] if saturated else 0:g} s warm-up; p50 at Triton "
                f"{_s(_median(_values(saturated, 'latency_p50_s')))}, in-flight window median "
                f"{_median(_values(saturated, 'window_limit_median'))}",
            ],
        ),
        Figure(
            key="O-unloaded",
            title="reference: unloaded service time (s at Triton, one frame in flight)",
            numerator="median time at Triton (s)",
            denominator="-",
            unit="s",
            a=[float(v) for v in unloaded_s if v is not None],
            b=[],
            target=None,
            higher_is_better=False,
            notes=[
                "one camera, realtime: false, min_in_flight = max_in_flight = "
                "max_in_flight_per_camera = 1: every frame finds Triton idle; time at Triton "
                "= from writing the request to the stream to its answer "
                f"(PlateRecognizer.latency_observers); one run per round, "
                f"{_sum(unloaded, 'latencies')} answers in all, p99 "
                f"{_s(_median(_values(unloaded, 'latency_p99_s')))} (median over the rounds)",
            ],
        ),
    ]
    for runs in steps:
        figures.extend(step_figures(runs, sat, unloaded_s))
    figures.extend(memory_per_camera(steps))
    wrong = [_sum(runs, "wrong_text_events") for runs in steps]
    events = [_sum(runs, "events") for runs in steps]
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
                "per step, all rounds (cameras: wrong / events): "
                + ", ".join(
                    f"{runs[0]['cameras']}: {w} / {e}"
                    for runs, w, e in zip(steps, wrong, events, strict=True)
                    if runs
                ),
                "texts seen: "
                + ", ".join(sorted({t for runs in steps for r in runs for t in r["event_texts"]})),
            ],
            extra={"wrong": wrong, "events": events},
        )
    )
    return figures


def step_figures(
    runs: list[dict[str, Any]], sat_fps: list[float], unloaded_s: list[float | None]
) -> list[Figure]:
    """The figures of one step from its per-round summaries (``runs[r]`` against the
    references of round ``r``: ``sat_fps[r]``, ``unloaded_s[r]``)."""
    n = runs[0]["cameras"]
    cams = f"{n} camera{'s' if n > 1 else ''}"
    limits = [bound(n, sat_fps[r["round"]]) for r in runs]
    offered = SAMPLE_FPS * n
    sat = statistics.median(sat_fps)
    common = (
        f"{n} file camera(s), each looping yard_cam.ts from its own offset (i/N of the clip) "
        f"in real time, sample_fps {SAMPLE_FPS:g}, default triton settings, motion gating "
        f"off; {len(runs)} runs interleaved with the other steps, each "
        f"{_median(_values(runs, 'window_s')) or 0:.0f} s measured after a "
        f"{runs[0]['warmup_s']:g} s warm-up"
    )
    least = [float(min(r["answered_per_camera"].values(), default=0)) for r in runs]
    most = [float(max(r["answered_per_camera"].values(), default=0)) for r in runs]
    figures = [
        Figure(
            key=f"O{n}-rate",
            title=f"overload, {cams}: answered frames/s vs min(offered, saturated)",
            numerator="answered frames/s",
            denominator="min(offered 5N, saturated rate of the round)",
            unit="frames/s",
            a=[float(r["answered_fps"]) for r in runs],
            b=limits,
            target=RATE_TARGET,
            higher_is_better=True,
            notes=[
                common,
                f"offered {offered:g} frames/s (queued by the cameras: "
                f"{_median(_values(runs, 'sampled_fps')) or 0:.2f}), saturated 1-camera rate "
                f"{sat:.2f} (median of the rounds): the bound "
                + ("is the offered rate (below saturation)" if offered < sat else "is saturation"),
                _failures(runs),
                f"in-flight window median {_median(_values(runs, 'window_limit_median'))}, max "
                f"{max(_values(runs, 'window_limit_max'), default=None)}; events "
                f"{_sum(runs, 'events')}, wrong-text {_sum(runs, 'wrong_text_events')}",
            ],
            extra={
                "cameras": n,
                "offered_fps": offered,
                "saturated_fps": sat,
                "window_limit_median": _median(_values(runs, "window_limit_median")),
                **{
                    k: _sum(runs, k)
                    for k in (
                        "failed",
                        "late",
                        "timed_out",
                        "resets",
                        "dropped",
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
                a=least,
                b=most,
                target=SHARE_TARGET,
                higher_is_better=True,
                notes=[
                    common,
                    "answered per camera, by round: "
                    + "; ".join(
                        ", ".join(f"{k} {v}" for k, v in r["answered_per_camera"].items())
                        for r in runs
                    ),
                ],
                extra={"answered_per_camera": [r["answered_per_camera"] for r in runs]},
            )
        )
    p99 = [(r.get("latency_p99_s"), unloaded_s[r["round"]]) for r in runs]
    p99 = [(a, b) for a, b in p99 if a is not None and b is not None]
    capture = _values(runs, "capture_p99_s")
    figures.append(
        Figure(
            key=f"O{n}-p99",
            title=f"overload, {cams}: p99 time at Triton vs unloaded",
            numerator="p99 time at Triton (s)",
            denominator="unloaded median of the round (s)",
            unit="s",
            a=[float(a) for a, _ in p99],
            b=[float(b) for _, b in p99],
            target=P99_TARGET,
            higher_is_better=False,
            notes=[
                common,
                f"{_sum(runs, 'latencies')} answers, p50 "
                f"{_s(_median(_values(runs, 'latency_p50_s')))}; time at Triton = from "
                "writing the request to the stream to its answer, late ones included (frames "
                "waiting for a permit are not at Triton); from capture to answer (O"
                f"{n}-capture): p99 {_s(_median(capture))}",
            ],
        )
    )
    figures.append(
        Figure(
            key=f"O{n}-capture",
            title=f"overload, {cams}: p99 from capture to answer (s)",
            numerator="p99 capture to answer (s)",
            denominator="-",
            unit="s",
            a=capture,
            b=[],
            target=None,
            higher_is_better=False,
            notes=[
                common,
                "from a frame's decode (Frame.monotonic) to its result reaching the camera's "
                "tracker (the service's on_result hook): the camera's queue, the wait for a "
                "permit, time at Triton and the in-order hand-over; "
                f"{_sum(runs, 'captures')} answers, p50 "
                f"{_s(_median(_values(runs, 'capture_p50_s')))}; frames that never got an "
                f"answer (dropped by the queue {_sum(runs, 'dropped')}, superseded "
                f"{_sum(runs, 'superseded')}, failed {_sum(runs, 'failed')}) are not in it",
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
                a=[statistics.median(r[end]) for r in runs],
                b=[statistics.median(r[start]) for r in runs],
                target=RSS_TARGET,
                higher_is_better=False,
                notes=[
                    common,
                    "per round, the medians of the samples in the first and the last 15 % of "
                    "its measured window"
                    + (
                        " (the service's own process, a fresh one per run)"
                        if key == "rss"
                        else " (tritonserver and its model stubs summed; one server for the "
                        "whole suite)"
                    ),
                ],
            )
        )
    return figures


def memory_per_camera(steps: list[list[dict[str, Any]]]) -> list[Figure]:
    """What each camera beyond the first adds to the service's RSS, from the 1-camera step to
    the largest, round by round (the same round's runs), against the budget per camera."""
    by_cameras = {runs[0]["cameras"]: runs for runs in steps if runs}
    if 1 not in by_cameras or max(by_cameras) < 2:
        return []
    n = max(by_cameras)

    def end_by_round(runs: list[dict[str, Any]]) -> dict[int, float]:
        return {r["round"]: statistics.median(r["rss_end_mib"]) for r in runs}

    one, many = end_by_round(by_cameras[1]), end_by_round(by_cameras[n])
    rounds = sorted(one.keys() & many.keys())
    added = [(many[r] - one[r]) / (n - 1) for r in rounds]
    return [
        Figure(
            key=f"O{n}-rss-per-camera",
            title=f"overload, {n} cameras: service RSS per camera added / budget",
            numerator=f"MiB per camera (RSS at {n} - RSS at 1) / {n - 1}",
            denominator="budget (MiB per 1080p camera at 5 fps)",
            unit="MiB",
            a=added,
            b=[RSS_PER_CAMERA_BUDGET_MIB] * len(added),
            target=1.0,
            higher_is_better=False,
            notes=[
                f"per round, the median RSS of the last 15 % of the {n}-camera run minus that "
                "of the 1-camera run of the same round, over the cameras added; what the "
                "process holds with one camera (Python, the libraries, the client, the first "
                "decoder) is not per camera: the RSS at 1 camera "
                f"{statistics.median(one.values()):.0f} MiB, at {n} "
                f"{statistics.median(many.values()):.0f} MiB "
                f"({statistics.median(many.values()) / n:.0f} MiB per camera all included); "
                "the decoder of a 1080p H.264 High stream with B-frames keeps about 27 MiB of "
                "pictures whatever the service does (`bench/decoder_memory.py`)",
            ],
        )
    ]


def _s(value: float | None) -> str:
    return f"{value:.3f} s" if value is not None else "-"
