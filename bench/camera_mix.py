"""Phase C, cameras per core, for two kinds of camera, each measured in a run of its own.

* ``busy``: cameras the motion gate cannot skip. Each loops yard_cam.ts (vehicles in view in
  every frame) from its own offset (bench/clips.py, ``ladder_clips``), with the gate off, so
  every sampled frame goes to the detector: what a camera costs whose scene never stops
  moving (a busy road, trees in the wind), the gate's own check (about 1 ms a frame) aside.
* ``mix``: a realistic mix. Each camera loops a 40 s clip: yard_cam.ts (8 s, vehicles in view)
  within 32 s of real stillness (the yard, nothing moving, sensor noise in every frame, the
  parked car's plate blurred: bench/clips.py), so a vehicle is in view 20 % of the time;
  camera ``i`` has its vehicles ``i * 32 / K`` seconds into the period, so they do not all come
  at once; ``motion.enabled: true``.

Cameras are real time (``realtime: true``) at sample_fps 5; the service runs in its own worker
process for ``plan.mix_s`` seconds, the first ``plan.mix_warmup_s`` left out. Measured over the
window: CPU seconds of the whole tree (the service process plus Triton's server and stubs) per
camera-second, and whether every camera kept up: of the frames the gate let through (queued),
those not lost (superseded by a newer frame while waiting for Triton, dropped by the queue, or
failed, deadline failures included), for the worst camera. Cameras per core = K / (CPU cores
busy), reported when they kept up: how many such cameras one core serves at this load. K is
chosen below saturation from the saturated 1-camera rate of phase O when it ran in the same
suite (``busy``: every frame is detector work; ``mix``: only the share with a vehicle in view),
so neither figure extrapolates a lightly loaded run to a full core by more than that margin.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from bench.capacity import SAMPLE_FPS, measure, saturated_fps
from bench.clips import ladder_clips, mix_clips
from bench.common import CLIP_FPS, Figure, count_frames, log

if TYPE_CHECKING:
    from pathlib import Path

    from bench.run_all import Suite

KEPT_UP_TARGET = 0.95
#: K is sized so that the cameras' detector work is this share of the saturated rate.
MIX_LOAD = 0.6
MAX_CAMERAS = 16
KINDS = ("busy", "mix")
TITLES = {
    "busy": "a camera the gate cannot skip (every sampled frame inferred)",
    "mix": "realistic mix (vehicle in view 20 %, motion gating on)",
}


def cameras_for(
    planned: int, vehicle_share: float, saturated_fps: float | None, per_core: int = 2
) -> int:
    """``planned`` if set; else sized from the saturated rate, else ``per_core`` per core."""
    if planned > 0:
        return planned
    if saturated_fps:
        per_camera = SAMPLE_FPS * vehicle_share  # frames/s of detector work
        return max(1, min(MAX_CAMERAS, math.floor(MIX_LOAD * saturated_fps / per_camera)))
    return max(1, min(MAX_CAMERAS, per_core * len(os.sched_getaffinity(0))))


def phase_mix(suite: Suite) -> None:
    plan = suite.plan
    real_s = count_frames(suite.source) / CLIP_FPS
    share = real_s / (real_s + plan.mix_still_s)
    saturated = saturated_fps(suite.raw.get("overload_ladder", {}))
    folder = suite.workdir / "mix"
    folder.mkdir(parents=True, exist_ok=True)
    busy = cameras_for(0, 1.0, saturated, per_core=0)
    mix = cameras_for(plan.mix_cameras, share, saturated)
    clips: dict[str, list[Path]] = {
        "busy": ladder_clips(suite.source, (busy,), suite.workdir / "ladder-clips")[busy],
        "mix": mix_clips(suite.source, plan.mix_still_s, mix, folder),
    }
    chosen = {
        "busy": f"{MIX_LOAD:g} x saturated rate / 5 fps" if saturated else "1 (O did not run)",
        "mix": "--mix-cameras"
        if plan.mix_cameras > 0
        else f"{MIX_LOAD:g} x saturated rate / (5 fps x vehicle share)"
        if saturated
        else "2 per core (phase O did not run)",
    }
    suite.raw["camera_mix"] = {}
    for kind in KINDS:
        log(f"C {kind}: {len(clips[kind])} real-time cameras, {plan.mix_s:g} s")
        summary = measure(
            suite,
            f"c-{kind}",
            clips[kind],
            realtime=True,
            seconds=plan.mix_s,
            warmup_s=plan.mix_warmup_s,
            camera_extra={"motion": {"enabled": kind == "mix"}},
        )
        summary.update(
            kind=kind,
            vehicle_share=1.0 if kind == "busy" else share,
            saturated_fps=saturated,
            chosen_by=chosen[kind],
        )
        suite.raw["camera_mix"][kind] = summary
        suite.figures.extend(mix_figures(summary))


def mix_figures(summary: dict[str, Any]) -> list[Figure]:
    """``C-<kind>``, ``C-<kind>-kept-up`` and, for the gated mix, ``C-mix-gate``."""
    kind = summary.get("kind", "mix")
    gated = kind == "mix"
    cameras = summary["cameras"]
    span = summary["window_s"]
    cpu = summary["service_cpu_s"] + summary["triton_cpu_s"]
    cores = cpu / span if span > 0 else 0.0
    camera_s = cameras * span
    queued = summary["sampled"]
    kept = queued - summary["superseded"] - summary["dropped"] - summary["failed"]
    offered = queued + summary["skipped_no_motion"]
    worst_name, worst = worst_camera(summary["per_camera"])
    kept_up = queued > 0 and _kept(worst) >= KEPT_UP_TARGET
    common = (
        f"{cameras} real-time file cameras, sample_fps {SAMPLE_FPS:g}, "
        + (
            f"motion gating on, a vehicle in view {summary['vehicle_share']:.0%} of the time "
            "(the cameras' vehicles staggered over the period, real stillness in between)"
            if gated
            else "motion gating off: every sampled frame goes to the detector (yard_cam.ts "
            "looped, vehicles in view in every frame, each camera from its own offset)"
        )
        + f", {span:.0f} s measured after a {summary['warmup_s']:g} s warm-up; K chosen by "
        f"{summary['chosen_by']}"
    )
    cpu_note = (
        f"CPU over the window: service {summary['service_cpu_s']:.1f} s + Triton tree "
        f"{summary['triton_cpu_s']:.1f} s = {cpu:.1f} s over {span:.0f} s = {cores:.2f} cores "
        f"busy; {1e3 * cpu / camera_s if camera_s else 0:.0f} CPU ms per camera-second, "
        f"{1e3 * cpu / summary['answered'] if summary['answered'] else 0:.0f} per answered frame"
    )
    key = f"C-{kind}"
    figures = [
        Figure(
            key=key,
            title=f"cameras per core at 5 fps, {TITLES[kind]}",
            numerator="cameras (all kept up)",
            denominator="CPU cores busy (service + Triton)",
            unit="cameras",
            a=[float(cameras)] if kept_up else [],
            b=[cores] if kept_up else [],
            target=None,
            higher_is_better=True,
            notes=[
                common,
                cpu_note,
                *(
                    []
                    if kept_up
                    else [
                        f"NOT KEPT UP (see {key}-kept-up): the figure would not be a capacity; "
                        "rerun with fewer cameras" + (" (--mix-cameras K)" if gated else "")
                    ]
                ),
            ],
            extra={
                "cpu_ms_per_camera_s": 1e3 * cpu / camera_s if camera_s else None,
                "cores_busy": cores,
                "cameras": cameras,
                "kept_up": kept_up,
            },
        ),
        Figure(
            key=f"{key}-kept-up",
            title=f"cameras per core, {kind}: frames not lost / queued, worst camera",
            numerator="frames not lost",
            denominator="frames queued" + (" past the gate" if gated else ""),
            unit="frames",
            a=[float(worst["sampled"] - _lost(worst))],
            b=[float(worst["sampled"])],
            target=KEPT_UP_TARGET,
            higher_is_better=True,
            notes=[
                common,
                "a queued frame is lost when a newer one replaces it while it waits for a "
                "permit (superseded), when the camera's queue drops it, or when it fails; the "
                "others were answered, or were on their way when the window ended "
                f"(answered {summary['answered']}); the row is the worst camera "
                f"({worst_name}); all cameras together: {kept} of {queued}",
                f"failed {summary['failed']} (deadline: {summary['timed_out']} timed out, "
                f"{summary['late']} late), dropped by the queues {summary['dropped']}, "
                f"superseded {summary['superseded']}; events {summary['events']} "
                f"({summary['wrong_text_events']} wrong-text); p99 at Triton "
                f"{_s(summary['latency_p99_s'])}, from capture to answer "
                f"{_s(summary.get('capture_p99_s'))}",
            ],
            extra={"cameras": cameras, "kind": kind},
        ),
    ]
    if gated:
        figures.append(
            Figure(
                key="C-mix-gate",
                title="cameras per core, mix: share of sampled frames the motion gate sent",
                numerator="frames sent (queued)",
                denominator="frames sampled at 5 fps",
                unit="frames",
                a=[float(queued)],
                b=[float(offered)],
                target=None,
                higher_is_better=False,
                notes=[
                    "sampled = queued + skipped_no_motion (camera.source.stats); with a "
                    f"vehicle in view {summary['vehicle_share']:.0%} of the time, what the gate "
                    "sends beyond that is the first frame of each loop, the re-reads of live "
                    "tracks (stationary_interval_s) and what the still stretches' noise set off"
                ],
            )
        )
    return figures


def _s(value: float | None) -> str:
    return f"{value:.2f} s" if value is not None else "-"


def _lost(counts: dict[str, int]) -> int:
    return counts["superseded"] + counts["dropped"] + counts["failed"]


def _kept(counts: dict[str, int]) -> float:
    """Frames not lost / queued past the gate (1 for a camera the gate sent nothing of)."""
    queued = counts["sampled"]
    return (queued - _lost(counts)) / queued if queued else 1.0


def worst_camera(per_camera: dict[str, dict[str, int]]) -> tuple[str, dict[str, int]]:
    """The camera that kept up least (frames not lost / queued past the gate)."""
    if not per_camera:
        return "-", {"sent": 0, "failed": 0, "sampled": 0}
    name = min(per_camera, key=lambda camera: _kept(per_camera[camera]))
    return name, per_camera[name]
