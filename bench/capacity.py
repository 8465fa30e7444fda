"""Phase O, the overload ladder: N real-time cameras against one Triton, N = 1, 2, 4, 8, 16.

Every camera plays a clip of its own (bench/clips.py, ``ladder_clips``): yard_cam.ts rotated so
that camera ``i`` of ``N`` starts ``i / N`` of the way into it, encoded like the source; so the
cameras' vehicles, and the detector and recogniser work they bring, come at different moments
(with one clip in lockstep every camera would offer the same work at the same time, and an
even share would be equal by construction). A run is the service in its own worker process
(bench/timeline.py) for ``plan.ladder_step_s`` seconds on N file cameras looping their clips in
real time (``realtime: true``, sample_fps 5, default ``triton`` settings, the motion gate off so
that every sampled frame is offered, ``dedup_window_s: 0`` so that every pass of the looping
clip is an event); the first ``plan.ladder_warmup_s`` seconds are left out. Two references,
on the clip at offset 0:

* the saturated 1-camera rate: one camera looping the clip as fast as possible
  (``realtime: false``: the decode thread waits for the pipeline, nothing is dropped);
* the unloaded service time: the median time at Triton of a frame with nothing else in
  flight (one camera, ``realtime: false``, ``min_in_flight = max_in_flight =
  max_in_flight_per_camera = 1``).

The runs are interleaved (:func:`schedule`): ``plan.ladder_rounds`` rounds (at least
:data:`MIN_ROUNDS`), each running both references and every step once, the order rotated from
round to round, so that drifting load from other processes hits every step alike. A figure's
numerator and denominator are per-round values (a step against the references of its own
round): ratio = median / median, the per-round ratios its spread.

Per step (figures ``O<N>-...``): answered frames/s against ``min(offered 5N, saturated)``
(>= 0.9; below saturation the offered rate is the bound), the per-camera share (answered
frames of the least-served camera / the most-served, >= 0.8), p99 time at Triton / unloaded
(<= 2) and, beside it, p99 from capture to answer (``O<N>-capture``: from a frame's decode to
its result reaching the camera's tracker, so the camera's queue, the wait for a permit and
Triton; frames dropped or superseded on the way have no answer and are counted apart), RSS
growth after the warm-up of the service and of Triton's tree (< 5 %), and failures; passes
whose text (at their last version: a correction replaces what it corrects, as ``python -m
streamer replay`` counts) is not one of the clip's two plates are counted (``O-wrong-text``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.clips import TRUE_TEXTS, ladder_clips
from bench.common import log
from bench.ladder_figures import (  # noqa: F401  (the phases' constants, re-exported)
    P99_TARGET,
    RATE_TARGET,
    RSS_TARGET,
    SAMPLE_FPS,
    SHARE_TARGET,
    bound,
    ladder_figures,
    step_figures,
)
from bench.service_run import ServiceSpec
from bench.timeline import logged, run_worker, sample_interval, summarize_run

if TYPE_CHECKING:
    from bench.run_all import Suite

#: One frame in flight, whatever the window would grow to: the service time of one frame.
UNLOADED_WINDOW = {"min_in_flight": 1, "max_in_flight": 1, "max_in_flight_per_camera": 1}
LOOP_EVENTS = {"dedup_window_s": 0}
#: The ladder runs every step at least this many times, interleaved.
MIN_ROUNDS = 3
SATURATED, UNLOADED = "saturated", "unloaded"


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
        if k not in ("timeline", "latencies", "captures", "event_log", "event_latency_s")
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
    captures = result.get("captures", [])
    kept["captures_s"] = [[round(t - begin, 2), round(v, 4)] for t, v in captures]
    events = result.get("event_log", [])
    kept["event_list"] = [[round(t - begin, 2), camera, text] for t, camera, text, _ in events]
    return kept


def schedule(ladder: Sequence[int], rounds: int) -> list[list[str]]:
    """The runs of each round (at least :data:`MIN_ROUNDS`): both references and every step
    once, the order rotated by ``len / rounds`` places from one round to the next."""
    runs = [SATURATED, UNLOADED, *(str(n) for n in dict.fromkeys(ladder))]
    rounds = max(MIN_ROUNDS, rounds)
    return [
        runs[r * len(runs) // rounds :] + runs[: r * len(runs) // rounds] for r in range(rounds)
    ]


def phase_ladder(suite: Suite) -> None:
    plan = suite.plan
    clips = ladder_clips(suite.source, plan.ladder, suite.workdir / "ladder-clips")
    order = schedule(plan.ladder, plan.ladder_rounds)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in order[0]}
    for r, names in enumerate(order):
        for name in names:
            log(f"O round {r + 1}/{len(order)}: {name}")
            if name in (SATURATED, UNLOADED):
                summary = measure(
                    suite,
                    f"o-{name}-{r}",
                    clips[0],
                    realtime=False,
                    seconds=plan.ref_s,
                    warmup_s=plan.ref_warmup_s,
                    triton_extra=UNLOADED_WINDOW if name == UNLOADED else None,
                )
            else:
                summary = measure(
                    suite,
                    f"o-{name}-{r}",
                    clips[int(name)],
                    realtime=True,
                    seconds=plan.ladder_step_s,
                    warmup_s=plan.ladder_warmup_s,
                )
            summary["round"] = r
            runs[name].append(summary)
    suite.raw["overload_ladder"] = {
        "schedule": order,
        "clips": {n: [p.name for p in paths] for n, paths in clips.items()},
        "saturated": runs.pop(SATURATED),
        "unloaded": runs.pop(UNLOADED),
        "steps": [runs[str(n)] for n in dict.fromkeys(plan.ladder)],
    }
    ladder = suite.raw["overload_ladder"]
    suite.figures.extend(ladder_figures(ladder["saturated"], ladder["unloaded"], ladder["steps"]))


def saturated_fps(ladder: dict[str, Any]) -> float | None:
    """The median saturated 1-camera rate over the rounds of a ladder's raw results."""
    rates = [r["answered_fps"] for r in ladder.get("saturated", [])]
    return statistics.median(rates) if rates else None
