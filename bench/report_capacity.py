"""The document's parts for the capacity phases (O, M, C, R): text, profile commands, plans.

``bench/report.py`` calls :func:`sections` for the text under "Where the time goes" and looks
missed figures up here through :func:`family` (``O4-rate`` -> ``O-rate``: one plan for every
step of the ladder).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from typing import Any

from bench.common import Figure

_STEP = re.compile(r"^O\d+-")


def family(key: str) -> str:
    """``O16-p99`` -> ``O-p99``; ``R-openvino`` -> ``R``; ``C-mix-kept-up`` -> ``C-kept-up``;
    other keys are their own family."""
    if _STEP.match(key):
        return _STEP.sub("O-", key)
    if key.startswith("R-"):
        return "R"
    if key.startswith("C-") and key.endswith("-kept-up"):
        return "C-kept-up"
    return key


def _cameras(key: str) -> str:
    return key[1:].split("-", 1)[0]


def profile_target(figure: Figure, quick: bool) -> tuple[str, ...] | None:
    """The ``bench.profile`` arguments for a missed capacity figure, or None."""
    seconds = "10" if quick else "30"
    if family(figure.key) in ("O-rate", "O-share", "O-p99"):
        cameras = _cameras(figure.key)
        return ("service", "--realtime", "--cameras", cameras, "--seconds", seconds)
    if family(figure.key) == "C-kept-up":
        cameras = str(figure.extra.get("cameras", 4))
        motion = ("--motion",) if figure.extra.get("kind", "mix") == "mix" else ()
        return ("service", "--realtime", *motion, "--cameras", cameras, "--seconds", seconds)
    return None


PROFILE_COMMANDS: dict[str, list[str]] = {
    "O-rate": [
        "# the step's load (N real-time cameras at 5 fps) under py-spy, service and stubs",
        ".venv/bin/python -m bench.profile service --realtime --cameras N --seconds 30",
        "# the ingest alone: CPU per decoded frame (every frame is decoded, 1 in 3 kept)",
        ".venv/bin/python -m bench.profile ingest",
    ],
    "O-share": [".venv/bin/python -m bench.profile service --realtime --cameras N --seconds 30"],
    "O-p99": [
        ".venv/bin/python -m bench.profile service --realtime --cameras N --seconds 30",
        "# the window and the latencies of one step, sample by sample",
        ".venv/bin/python -m bench --only O --ladder N --no-doc  # then raw.overload_ladder",
    ],
    "O-rss": [
        "# the same step, longer: a leak keeps rising, a ramp levels off",
        ".venv/bin/python -m bench --only O --ladder N --no-doc",
        "py-spy dump --pid WORKER_PID  # what a thread is doing at a moment",
    ],
    "O-triton-rss": [".venv/bin/python -m bench --only O --ladder N --no-doc"],
    "O-rss-per-camera": [
        "# RSS every 10 s with N cameras and with 1, the service in this process",
        ".venv/bin/python -m bench.overload_memory --cameras N --seconds 60",
        ".venv/bin/python -m bench.overload_memory --cameras 1 --seconds 60",
        "# what one camera's decoder keeps, apart from the service",
        ".venv/bin/python -m bench.decoder_memory --cameras 8",
    ],
    "M": [
        "# the gate's decisions on a clip, frame by frame (first / motion / stationary / skip)",
        ".venv/bin/python -m streamer.ingest.motion CLIP",
    ],
    "C-kept-up": [
        "# the mix (--motion); without it, cameras the gate cannot skip",
        ".venv/bin/python -m bench.profile service --realtime --motion --cameras K --seconds 30",
        ".venv/bin/python -m bench --only O,C --mix-cameras K --no-doc  # fewer cameras",
    ],
    "R": [".venv/bin/python -m bench.runtimes --rounds 5  # more rounds, its own JSON"],
}

PLANS: dict[str, str] = {
    "O-rate": (
        "Below saturation (5N under the saturated rate) a miss means frames were offered and "
        "Triton had room, yet they were not answered: look at the step's failures and queue "
        "drops; deadline failures there point at the window (O-p99). At and above "
        "saturation the rate falls as N grows because the cameras' ingest takes CPU from the "
        "detector on the same 2 cores: every camera decodes its 15 fps stream whether or not "
        "its frames get a turn. Done: non-reference frames are not decoded when a camera "
        "samples under half its frame rate (cameras[].skip_non_reference_frames; on this "
        "clip 62 of 120 frames decoded), and a sampled frame is converted to BGR only when "
        "it is sent (Frame.image), so the frames superseded under overload cost no "
        "conversion. Next, in order of gain: (1) a camera substream at lower resolution or "
        "frame rate where the site has one (decode cost scales with pixels); (2) one decode "
        "thread per camera when cameras outnumber cores (thread_type SLICE / thread_count "
        "1), so N decoders do not oversubscribe the cores; (3) hardware decoding on the GPU "
        "target; (4) on a CPU-only site, a Triton on its own cores (the figure is the whole "
        "machine's). The profile shows the decode threads' share."
    ),
    "O-share": (
        "The cameras play the clip from different offsets, so at any moment some bring a "
        "vehicle (more crops for stn and lprnet) and others an empty yard: the share is "
        "measured, not equal by construction. "
        "Compare each camera's frames queued with its frames answered (raw.overload_ladder "
        "steps, round by round: answered_per_camera, and the cameras' sampled counts): if the "
        "queued counts "
        "already differ, decode threads were starved of CPU and fell behind real time (the "
        "unfairness is upstream of the scheduler: O-rate's plan); if they are equal and the "
        "answers are not, the FairScheduler did not share the window by weight: reproduce "
        "the arrival pattern in tests/streamer/inference/test_scheduler.py."
    ),
    "O-p99": (
        "Time at Triton is held near the no-load latency by the adaptive window: it settles "
        "at the frames Triton runs in parallel (2 on this CPU: two single-thread detector "
        "instances) and tries a larger one only now and then "
        "(streamer/inference/scheduler.py). Look "
        "at the step's window series and latency percentiles (raw.overload_ladder): if the "
        "window stays at 2 and the p50 itself rose with N, each frame takes longer because "
        "the 2 cores are shared with the cameras' decoding (O-rate's plan; no window setting "
        "replaces it). If the tail comes from pairs of frames that arrive together (the "
        "cameras start together, so their 5 fps ticks line up) and are batched onto one "
        "single-thread detector instance while "
        "the other idles, build the CPU detector with max_batch_size 1 (batching buys "
        "nothing on one thread; measured once: p99 0.60 s instead of 0.77 s, 2 cameras). "
        "Probes show as short steps of the window to 3. The p99 from capture to answer "
        "(O<N>-capture, beside it) adds what a frame waits before Triton: the camera's "
        "queue and the wait for a permit; if it grows while time at Triton does not, the "
        "window is holding frames back to keep Triton's queue short, as designed, and the "
        "cameras' answers come later: fewer cameras per Triton, or more capacity."
    ),
    "O-rss": (
        "Each run of a step measures about 30 s after its warm-up (3 runs, a fresh service "
        "each); growth over 5 % there may still be the "
        "ramp (decoder frame pools of each camera, the allocator's high-water mark with more "
        "frames in flight). Run the step longer (`--only O --ladder N` with a longer "
        "ladder_step_s) to tell a ramp from a leak, then tracemalloc as for P4 "
        "(bench/service_run.py --tracemalloc); memory outside Python (FFmpeg's pools) shows "
        "as RSS growth that tracemalloc does not see."
    ),
    "O-triton-rss": (
        "Triton's tree serves the whole suite: growth inside a step is new batch shapes and "
        "the stubs' allocators meeting more concurrent frames. If it keeps rising step after "
        "step, see P4-triton's notes (MALLOC_ARENA_MAX=2 for the stubs, tracemalloc in the "
        "BLS)."
    ),
    "O-rss-per-camera": (
        "A camera costs its decoder's picture pool (about 27 MiB for 1080p H.264 with "
        "B-frames, `bench.decoder_memory`), the pictures it has queued (frame_queue_size) "
        "and in flight (max_in_flight_per_camera), each 3.1 MB as YUV 4:2:0, and what the "
        "allocator keeps of them. Over budget: compare the service's figure with the "
        "decoder's; the difference is the frames the pipeline holds (a BGR conversion "
        "that outlives its use is 6.2 MB more per frame) or fragmentation (the allocator "
        "settings of streamer/foundation/allocator.py applied?)."
    ),
    "M": (
        "The gate sent more than 30 % of the frames: count its decisions on the clip "
        "(`python -m streamer.ingest.motion`-style check, or "
        "camera.source.stats.skipped_no_motion). "
        "A live track is re-read every stationary_interval_s (1 s) while nothing moves, by "
        "design: a parked car in view keeps its track alive; noise above the threshold in "
        "the still (encoder keyframes) or the camera's clock overlay changing each second "
        "counts as motion: mask the overlay (cameras[].motion.mask) and raise "
        "stationary_interval_s if re-reads dominate."
    ),
    "M-events": (
        "With gating the vote saw fewer reads of a plate (frames skipped while the car stood "
        "still) and came out differently. Compare both runs' events (reads, candidates: the "
        "events file of each run) track by track; if the lost reads are those of a vehicle "
        "standing between moves, lower stationary_interval_s; if a short pass lost its only "
        "reads, lower motion.min_area or threshold."
    ),
    "C-kept-up": (
        "K cameras were more than this machine serves for this kind of camera. For the mix: "
        "rerun with fewer (`--mix-cameras`), or look at when the frames were lost: several "
        "cameras' vehicles at once is a burst the cameras' queues absorb only by dropping "
        "frames. For cameras the gate cannot skip, K comes from O's saturated rate: if even "
        "one camera (5 frames/s, every one to the detector) did not keep up, this machine "
        "serves less than one such camera; O1-rate shows by how much."
    ),
    "R": (
        "A runtime slower than TorchScript here: compare the server CPU per frame (less "
        "sensitive to other load than frames/s); check that bf16 is native on this CPU "
        "(AMX or AVX512-BF16, else it is emulated) and the OpenVINO thread settings per "
        "instance against the instance count (2 threads per instance were slower than 1 "
        "under load on 2 cores)."
    ),
}


def sections(by_key: dict[str, Figure], figures: Sequence[Figure]) -> list[str]:
    """Lines under "Where the time goes" for the capacity phases that ran."""
    lines: list[str] = []
    saturated, unloaded = by_key.get("O-saturated"), by_key.get("O-unloaded")
    if saturated is not None:
        sat = _median(saturated.a)
        unl = _median(unloaded.a) if unloaded is not None else None
        lines.append(
            f"- **O**, the overload ladder: saturated 1-camera rate {_num(sat)} frames/s, "
            f"unloaded service time {_num(unl, 3)} s (medians of {len(saturated.a)} rounds; "
            "both references run once a round, interleaved with the steps). Every camera "
            "plays the clip from its own offset, so their vehicles come at different moments. "
            "Below saturation the bound of the answered rate is the offered rate "
            "(N cameras x 5 fps: all of it should be answered); from the step where 5N exceeds "
            "the saturated rate it is that rate, and the ladder shows what overload costs: "
            "with the window keeping Triton's queue short and each camera's queue dropping "
            "its oldest frame, answered frames/s should stay at saturation, shared evenly, at "
            "a bounded time at Triton; the p99 from capture to answer adds the camera's queue "
            "and the wait for a permit. Per step (medians over the rounds):"
        )
        lines += ["", *ladder_rows(list(figures)), ""]
    m = by_key.get("M")
    if m is not None:
        events = by_key.get("M-events")
        same = events is not None and events.verdict == "PASS"
        lines.append(
            f"- **M**, motion gating: {_num(m.ratio)} of the detector calls with the gate on "
            "(a clip that is still most of the time: the yard with sensor noise in every "
            "frame, nothing moving, no readable plate); the events "
            + ("are the same texts" if same else "DIFFER (see M-events): M cannot pass")
            + " with and without it."
        )
    parts = [
        f"{what}: {_cameras_per_core(c)}"
        for kind, what in C_KINDS.items()
        if (c := by_key.get(f"C-{kind}")) is not None
    ]
    if parts:
        lines.append(
            "- **C**, cameras per core at 5 fps, each kind in a run of its own: "
            + "; ".join(parts)
            + ". Cameras per core = cameras / (CPU s used by the whole tree per second), "
            "measured with every camera answered: how many such cameras a core serves; it "
            "counts decoding every stream, which the gate does not save. A site's figure lies "
            "between the two, by how much of the time its cameras see something move."
        )
    runtimes = [f for f in figures if f.key.startswith("R-")]
    if runtimes:
        lines.append(
            "- **R**, CPU runtimes, whole chain through Triton against TorchScript: "
            + "; ".join(
                f"{f.key[2:]} {_num(f.ratio)}x"
                + (" (texts differ: MISS)" if f.failed_checks else "")
                for f in runtimes
            )
            + ". A runtime passes only when it is at least as fast and reads the same texts."
        )
    return lines


C_KINDS = {
    "busy": "a camera the gate cannot skip (every sampled frame to the detector)",
    "mix": "a realistic mix (a vehicle in view 20 % of the time, motion gating on)",
}


def _cameras_per_core(c: Figure) -> str:
    x = c.extra
    if not x.get("kept_up"):
        return f"{x.get('cameras')} camera(s) did not keep up, so no figure"
    return (
        f"{_num(c.ratio)} cameras per core ({x.get('cameras')} cameras kept "
        f"{_num(x.get('cores_busy'))} cores busy, {_num(x.get('cpu_ms_per_camera_s'), 0)} CPU "
        "ms per camera-second)"
    )


def ladder_rows(figures: list[Figure]) -> list[str]:
    """A Markdown table of the ladder, one row per step, from the O figures alone."""
    by_key = {f.key: f for f in figures}
    rates = [f for f in figures if f.key.startswith("O") and f.key.endswith("-rate")]
    if not rates:
        return []
    rows = [
        "| cameras | offered f/s | answered f/s | bound | share min/max | p99 at Triton / "
        "unloaded | p99 capture to answer (s) | RSS growth service / Triton | failed / late / "
        "timed out | window | events (wrong text) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for rate in rates:
        x = rate.extra
        n = x.get("cameras", rate.key[1:].split("-")[0])
        share = by_key.get(f"O{n}-share")
        p99 = by_key.get(f"O{n}-p99")
        capture = by_key.get(f"O{n}-capture")
        rss, trss = by_key.get(f"O{n}-rss"), by_key.get(f"O{n}-triton-rss")
        rows.append(
            f"| {n} | {_num(x.get('offered_fps'), 0)} | {_num(_median(rate.a))} | "
            f"{_num(_median(rate.b))} | {_num(share.ratio if share else 1.0)} | "
            f"{_num(p99.ratio if p99 else None)} | "
            f"{_num(_median(capture.a) if capture else None)} | "
            f"{_num(rss.ratio if rss else None)} / "
            f"{_num(trss.ratio if trss else None)} | {x.get('failed', '-')} / "
            f"{x.get('late', '-')} / {x.get('timed_out', '-')} | "
            f"{x.get('window_limit_median', '-')} | {x.get('events', '-')} "
            f"({x.get('wrong_text_events', '-')}) |"
        )
    return rows


def reproduce(full: dict[str, Any]) -> str:
    """The capacity phases' part of the full plan's description (none in older results)."""
    if "ladder" not in full:
        return ""
    ladder = ", ".join(str(n) for n in full.get("ladder", ()))
    return (
        f"O runs {ladder} real-time cameras for {full.get('ladder_step_s', 0):g} s each "
        f"({full.get('ladder_warmup_s', 0):g} s warm-up left out) and two "
        f"{full.get('ref_s', 0):g} s reference runs, {full.get('ladder_rounds', 1)} rounds, "
        "the order rotated each round, each run in a worker process "
        f"(`python -m bench.service_run --sample-every`); M plays a clip with "
        f"{full.get('motion_still_s', 0):g} s still stretches {full.get('motion_rounds')} "
        f"times each way; C runs {full.get('mix_s', 0):g} s for each kind of camera; R is "
        "bench/runtimes.py's `suite_rows`, which serves each runtime from a Triton of its own."
    )


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _num(value: float | None, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "-"
