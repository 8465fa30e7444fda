"""Phase M, motion gating: the same clip with long still stretches, gated and not.

The clip (bench/clips.py, :func:`~bench.clips.gated_clip`, one encode as a camera's encoder
would make it): ``plan.motion_still_s`` seconds of real stillness (the yard with no vehicle
moving and no readable plate, with fresh sensor noise in every frame, so that no two still
frames are the same picture), yard_cam.ts, the still again. The service plays it once as fast
as possible (``Service(..., once=True)`` in-process, ``realtime: false``: nothing is dropped,
sample_fps 5, ``dedup_window_s: 0``) with ``cameras[].motion.enabled`` true and false, in
``plan.motion_rounds`` interleaved rounds. Figures: detector calls with gating / without
(target <= 0.30; the BLS calls the detector once per frame, so detector calls = frames sent to
Triton, ``camera.pipeline.stats.sent``), and whether the event texts are identical (``M-events``,
1 = every round's gated run reported the same texts as its ungated run). Gating is an option:
``M`` passes only when the texts are identical too (``Figure.failed_checks``).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from bench.capacity import SAMPLE_FPS
from bench.clips import CAMERA_KBPS, STILL_NOISE_NOTE, gated_clip
from bench.common import Figure, count_frames, log
from bench.service_run import ServiceSpec, run_service

if TYPE_CHECKING:
    from pathlib import Path

    from bench.run_all import Suite

CALLS_TARGET = 0.30


def run_once(suite: Suite, clip: Path, gated: bool, name: str) -> dict[str, Any]:
    spec = ServiceSpec(
        [clip],
        suite.triton.grpc_url,
        SAMPLE_FPS,
        realtime=False,
        events_extra={"dedup_window_s": 0},
        camera_extra={"motion": {"enabled": gated}},
    )
    result = run_service(spec, suite.workdir / name, suite.triton.pid)
    result.pop("event_latency_s", None)
    result["texts"] = sorted(text for _, text in result.pop("event_texts"))
    log(
        f"M {name}: {result['sent']} frames sent, {result['skipped_no_motion']} held back by "
        f"the gate, events {result['texts']}"
    )
    return result


def phase_motion(suite: Suite) -> None:
    plan = suite.plan
    folder = suite.workdir / "motion"
    folder.mkdir(parents=True, exist_ok=True)
    clip = gated_clip(suite.source, plan.motion_still_s, folder)
    frames = count_frames(clip)
    runs: dict[str, list[dict[str, Any]]] = {"gated": [], "ungated": []}
    for r in range(plan.motion_rounds):
        order = ["gated", "ungated"] if r % 2 == 0 else ["ungated", "gated"]
        for kind in order:
            result = run_once(suite, clip, kind == "gated", f"m-{kind}-{r}")
            result["round"] = r
            runs[kind].append(result)
    suite.raw["motion_gate"] = {
        "clip_frames": frames,
        "still_s": plan.motion_still_s,
        "runs": runs,
    }
    suite.figures.extend(motion_figures(runs, frames, plan.motion_still_s))


def motion_figures(
    runs: dict[str, list[dict[str, Any]]], frames: int, still_s: float
) -> list[Figure]:
    gated, ungated = runs["gated"], runs["ungated"]
    same = [
        Counter(g["texts"]) == Counter(u["texts"]) for g, u in zip(gated, ungated, strict=False)
    ]
    identical = bool(same) and all(same)
    common = (
        f"{frames} frames: {still_s:g} s of real stillness (the yard as the clip's last frame "
        "shows it, the parked car's plate blurred, nothing moving, with fresh sensor noise in "
        f"every frame: {STILL_NOISE_NOTE}), yard_cam.ts, {still_s:g} s still again; one "
        f"encode at a camera's bit rate ({CAMERA_KBPS} kb/s); played once as fast as possible, "
        f"sample_fps {SAMPLE_FPS:g}, dedup_window_s 0"
    )
    texts = "; ".join(
        f"round {g['round'] + 1}: gated {g['texts']}, ungated {u['texts']}"
        for g, u in zip(gated, ungated, strict=False)
    )
    return [
        Figure(
            key="M",
            title="motion gating: detector calls with gating / without",
            numerator="detector calls, gating on",
            denominator="detector calls, gating off",
            unit="calls",
            a=[float(r["sent"]) for r in gated],
            b=[float(r["sent"]) for r in ungated],
            target=CALLS_TARGET,
            higher_is_better=False,
            failed_checks=[] if identical else ["event texts differ with gating (M-events)"],
            notes=[
                common,
                "detector calls = frames sent to Triton (camera.pipeline.stats.sent; the BLS "
                "calls the detector once per frame); held back by the gate per gated run: "
                + ", ".join(str(r["skipped_no_motion"]) for r in gated),
                "motion settings: the defaults (threshold 20, min_area 0.0005, "
                "stationary_interval_s 1: a live track is re-read every second)",
            ],
        ),
        Figure(
            key="M-events",
            title="motion gating: identical event texts with and without (1 = yes)",
            numerator="rounds with identical texts",
            denominator="rounds",
            unit="rounds",
            a=[float(sum(same))] if same else [],
            b=[float(len(same))] if same else [],
            target=1.0,
            higher_is_better=True,
            notes=[texts or "no rounds"],
            extra={"identical": identical},
        ),
    ]
