"""Phase C, cameras per core: K real-time cameras of a realistic mix, motion gating on.

Each camera loops a 40 s clip: yard_cam.ts (8 s, vehicles in view) within 32 s of a still,
empty-looking scene (its last frame, the parked car's plate blurred: bench/clips.py), so a
vehicle is in view 20 % of the time; camera ``i`` has its vehicles ``i * 32 / K`` seconds into
the period, so they do not all come at once. Cameras are real time (``realtime: true``) at
sample_fps 5 with ``motion.enabled: true``; the service runs in its own worker process for
``plan.mix_s`` seconds, the first ``plan.mix_warmup_s`` left out.

Measured over the window: CPU seconds of the whole tree (the service process plus Triton's
server and stubs) per camera-second, and whether every camera kept up: of the frames the gate
let through (queued), those not lost (superseded by a newer frame while waiting for Triton,
dropped by the queue, or failed, deadline failures included), for the worst camera. Cameras per
core = K / (CPU cores busy), reported when they kept up: how many such cameras one core
serves at this load (K is chosen below saturation, from the saturated 1-camera rate of phase
O when it ran in the same suite).
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from bench.capacity import SAMPLE_FPS, measure
from bench.clips import mix_clips
from bench.common import CLIP_FPS, Figure, count_frames, log

if TYPE_CHECKING:
    from bench.run_all import Suite

KEPT_UP_TARGET = 0.95
#: K is sized so that the cameras' detector work is this share of the saturated rate.
MIX_LOAD = 0.6
MAX_CAMERAS = 16


def cameras_for(planned: int, vehicle_share: float, saturated_fps: float | None) -> int:
    """``planned`` if set; else sized from the saturated rate, else 2 per core."""
    if planned > 0:
        return planned
    if saturated_fps:
        per_camera = SAMPLE_FPS * vehicle_share  # frames/s with a vehicle in view
        return max(1, min(MAX_CAMERAS, math.floor(MIX_LOAD * saturated_fps / per_camera)))
    return max(1, min(MAX_CAMERAS, 2 * len(os.sched_getaffinity(0))))


def phase_mix(suite: Suite) -> None:
    plan = suite.plan
    real_s = count_frames(suite.source) / CLIP_FPS
    share = real_s / (real_s + plan.mix_still_s)
    ladder = suite.raw.get("overload_ladder", {})
    saturated = ladder.get("saturated", {}).get("answered_fps")
    cameras = cameras_for(plan.mix_cameras, share, saturated)
    folder = suite.workdir / "mix"
    folder.mkdir(parents=True, exist_ok=True)
    clips = mix_clips(suite.source, plan.mix_still_s, cameras, folder)
    log(f"C: {cameras} real-time cameras, vehicle in view {share:.0%}, {plan.mix_s:g} s")
    summary = measure(
        suite,
        "c-mix",
        clips,
        realtime=True,
        seconds=plan.mix_s,
        warmup_s=plan.mix_warmup_s,
        camera_extra={"motion": {"enabled": True}},
    )
    summary["vehicle_share"] = share
    summary["saturated_fps"] = saturated
    summary["chosen_by"] = (
        "--mix-cameras"
        if plan.mix_cameras > 0
        else f"{MIX_LOAD:g} x saturated rate / (5 fps x vehicle share)"
        if saturated
        else "2 per core (phase O did not run)"
    )
    suite.raw["camera_mix"] = summary
    suite.figures.extend(mix_figures(summary))


def mix_figures(summary: dict[str, Any]) -> list[Figure]:
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
        f"{cameras} real-time file cameras, sample_fps {SAMPLE_FPS:g}, motion gating on, a "
        f"vehicle in view {summary['vehicle_share']:.0%} of the time (the cameras' vehicles "
        f"staggered over the period), {span:.0f} s measured after a {summary['warmup_s']:g} s "
        f"warm-up; K chosen by {summary['chosen_by']}"
    )
    cpu_note = (
        f"CPU over the window: service {summary['service_cpu_s']:.1f} s + Triton tree "
        f"{summary['triton_cpu_s']:.1f} s = {cpu:.1f} s over {span:.0f} s = {cores:.2f} cores "
        f"busy; {1e3 * cpu / camera_s if camera_s else 0:.0f} CPU ms per camera-second"
    )
    return [
        Figure(
            key="C",
            title="cameras per core at 5 fps, realistic mix (vehicle in view 20 %)",
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
                        "NOT KEPT UP (see C-kept-up): the figure would not be a capacity; "
                        "rerun with fewer cameras (--mix-cameras K)"
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
            key="C-kept-up",
            title="cameras per core: frames not lost / let through by the gate, worst camera",
            numerator="frames not lost",
            denominator="frames queued past the gate",
            unit="frames",
            a=[float(worst["sampled"] - _lost(worst))],
            b=[float(worst["sampled"])],
            target=KEPT_UP_TARGET,
            higher_is_better=True,
            notes=[
                common,
                "a frame the gate let through is lost when a newer one replaces it while it "
                "waits for a permit (superseded), when the camera's queue drops it, or when it "
                "fails; the others were answered, or were on their way when the window ended "
                f"(answered {summary['answered']}); the row is the worst camera "
                f"({worst_name}); all cameras together: {kept} of {queued}",
                f"failed {summary['failed']} (deadline: {summary['timed_out']} timed out, "
                f"{summary['late']} late), dropped by the queues {summary['dropped']}, "
                f"superseded {summary['superseded']}; events {summary['events']} "
                f"({summary['wrong_text_events']} wrong-text); p99 at Triton "
                + (
                    f"{summary['latency_p99_s']:.2f} s"
                    if summary["latency_p99_s"] is not None
                    else "-"
                ),
            ],
            extra={"cameras": cameras},
        ),
        Figure(
            key="C-gate",
            title="cameras per core: share of sampled frames the motion gate sent",
            numerator="frames sent (queued)",
            denominator="frames sampled at 5 fps",
            unit="frames",
            a=[float(queued)],
            b=[float(offered)],
            target=None,
            higher_is_better=False,
            notes=[
                "sampled = queued + skipped_no_motion (camera.source.stats); with a vehicle "
                "in view 20 % of the time, what the gate sends beyond that is the first frame "
                "of each loop and the re-reads of live tracks (stationary_interval_s)"
            ],
        ),
    ]


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
