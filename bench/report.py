"""``docs/PERFORMANCE.md``: the table of the side-by-side suite, and what stands behind it."""

from __future__ import annotations

import math
import posixpath
from collections.abc import Sequence
from typing import Any

from bench import report_capacity
from bench.common import Figure, summarize

#: How to profile each figure's slower side when its target is missed (bench/profile.py).
PROFILE_COMMANDS: dict[str, list[str]] = {
    "P1": [
        ".venv/bin/python -m bench.profile service   # service process + Triton stubs",
        ".venv/bin/python -m bench.profile bare      # the bare loop it is compared with",
    ],
    "P2-1": [".venv/bin/python -m bench.profile service", ".venv/bin/python -m bench.profile seed"],
    "P2-4": [
        ".venv/bin/python -m bench.profile service --cameras 4",
        ".venv/bin/python -m bench.profile seed --cameras 4",
    ],
    "P3": [".venv/bin/python -m bench.profile ingest"],
    "P4": [
        "# where the service's Python allocations grow (tracemalloc, 20 % of the soak vs the end)",
        ".venv/bin/python -m bench --only P4 --soak-tracemalloc",
        "# what a thread is doing at a moment, during a soak",
        "py-spy dump --pid SERVICE_PID",
    ],
}

#: What to do about a missed target: the analysis behind each plan is in the text below the
#: table (CPU per frame on each side) and in the profile.
PLANS: dict[str, str] = {
    "P1": (
        "The service and the bare loop run the same models (the same runtime) with the same thread "
        "budget, so the gap is what the service adds per frame: the 6 MB BGR frame serialised "
        "into gRPC, copied into the BLS stub's shared memory, letterboxed there and passed on "
        "as an 11 MB FP32 tensor to the detector stub (another shared-memory copy), and the "
        "Python-backend round trips (BLS -> detector -> stn -> lprnet). On 2 cores every "
        "CPU-millisecond of that competes with the detector's torch threads. Plan, in "
        "order of gain per effort: (1) send the frame downscaled to the letterbox size (or "
        "already letterboxed, UINT8) from the client, cutting the gRPC and shared-memory bytes "
        "by ~2.2x and the BLS's resize, but the plate crops would lose resolution, so only "
        "with a second, full-resolution crop pass; (2) send YUV420 (1.5 B/px instead of 3) "
        "and convert inside Triton; (3) shared-memory transport (tritonclient system shm) "
        "for the frame; "
        "(4) letterbox with cv2 in UINT8 and convert to FP32 inside the detector model "
        "(TorchScript), so the BLS -> detector hop moves 4x fewer bytes. The profile shows "
        "which of these dominates on the machine at hand. Tried already (2 cores, `--only P1`): "
        "OMP_WAIT_POLICY=PASSIVE cut the service's CPU per frame by 13 % but not its frames/s, "
        "and slowed the bare loop by 20 %; the detector as 2 instances x 1 torch thread "
        "instead of 1 x 2 (the converter's default since) gave the service 15 % more frames/s."
    ),
    "P2-1": (
        "With one camera the service keeps 2 frames in flight, and so does the seed client "
        "(one synchronous request per detector instance), so both use every instance; if the "
        "service is not faster, its per-frame CPU (see P1) exceeds the seed client's JSON "
        "cost. Follow P1's plan; then compare both profiles."
    ),
    "P2-4": (
        "With 4 cameras the detector's dynamic batcher merges frames, which on a 2-core CPU "
        "gains nothing (the cores are already busy) while the seed client's 4 threads also "
        "keep both cores busy. Follow P1's plan (less CPU per frame outside the models is the "
        "only lever on this machine); batching pays on the GPU (bench/gpu/)."
    ),
    "P3": (
        "The ingest decodes every frame (as ffmpeg does) and converts the sampled ones to "
        "BGR (to_ndarray('bgr24'): a full-frame colour conversion and a 6 MB copy). If the "
        "ratio is over target: convert into a preallocated buffer, or send YUV (frame.to_ndarray"
        "('yuv420p'), no conversion, half the bytes) and convert inside Triton."
    ),
    "P4": (
        "A soak shorter than a few minutes (`--quick`: 0.5 min) puts both windows on the "
        "start-up ramp (decoder buffers, frames in flight, the first tracks' best frames), so "
        "its growth is not a leak test. Growth over 5 % in a 10-minute soak: run it longer to "
        "tell a leak from allocator warm-up "
        "(`--soak-minutes 30`), then tracemalloc snapshots of the service process "
        "(tracemalloc.start() in bench/service_run.py's worker, compare_to between the "
        "baseline and the end: `--soak-tracemalloc`) to find the growing allocation site; "
        "memory outside Python's allocator (FFmpeg's frame pools) shows as RSS growth that "
        "tracemalloc does not see."
    ),
}


#: Per-round ratios further apart than this (max / min) mean the run was disturbed.
NOISY_SPREAD = 1.5


def _fmt(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "MiB":
        return f"{value:.1f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.2f}"


def _side(samples: Sequence[float], unit: str) -> str:
    s = summarize(samples)
    if not s["n"]:
        return "-"
    return f"{_fmt(s['median'], unit)} [{_fmt(s['min'], unit)}–{_fmt(s['max'], unit)}] n={s['n']}"


def table(figures: Sequence[Figure]) -> str:
    """The Markdown table: one row per figure."""
    rows = [
        "| # | figure | numerator: median [min–max] n | denominator: median [min–max] n "
        "| ratio (median/median) | per-round ratios | target | result |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for f in figures:
        ratio = f.ratio
        rounds = f.round_ratios
        spread = f"{min(rounds):.2f}–{max(rounds):.2f}" if rounds else "-"
        target = f"{'≥' if f.higher_is_better else '≤'} {f.target:g}" if f.target else "-"
        if f.key == "P4-latency":
            numerator = (
                f"p50 {_fmt(f.extra.get('p50_s'), 's')} s, p99 {_fmt(f.extra.get('p99_s'), 's')} "
                f"s, n={f.extra.get('events', 0)} events"
            )
            rows.append(f"| {f.key} | {f.title} | {numerator} | - | - | - | - | info |")
            continue
        numerator = f"{f.numerator}: {_side(f.a, f.unit)}" if f.a else "-"
        denominator = f"{f.denominator}: {_side(f.b, f.unit)}" if f.b else "-"
        rows.append(
            f"| {f.key} | {f.title} | {numerator} | {denominator} | "
            f"{f'{ratio:.2f}' if ratio is not None else '-'} | {spread} | {target} | "
            f"**{f.verdict}**{_checks(f)} |"
        )
    return "\n".join(rows)


def _checks(figure: Figure) -> str:
    """`` (texts differ ...)`` after a verdict that a failed check made a MISS."""
    return f" ({'; '.join(figure.failed_checks)})" if figure.failed_checks else ""


def _breakdown(values: dict[str, float], unit: str = "ms/frame") -> str:
    return ", ".join(f"{k} {_fmt(v, unit)}" for k, v in values.items())


def _json_link(name: str | None) -> str:
    """The raw JSON sits next to the document: a relative link works on any checkout."""
    return f"[{name}]({name})" if name else "-"


def document(meta: dict[str, Any], figures: Sequence[Figure], table_md: str) -> str:
    plan = meta["plan"]
    full = meta.get("full_plan", {})
    by_key = {f.key: f for f in figures}
    lines: list[str] = ["# Performance", ""]
    lines += [
        "Generated by `make bench` (`.venv/bin/python -m bench`, code in `bench/`): do not edit "
        "by hand, run it again. Every figure is a ratio of two things measured side by side "
        "in the same run on the same machine (runs interleaved round by round, the order "
        "rotated each round); absolute times on a shared 2-core machine are noise, ratios "
        "much less so.",
        "",
    ]
    if plan["quick"]:
        lines += [
            f"> **Smoke run (`--quick`)**: 1-second clips, {plan['rounds']} rounds, a "
            f"{plan['soak_minutes']:g}-minute soak, on a "
            "machine shared with other heavy jobs. These figures check that the suite works; "
            "they are not the measurement. `make bench` (about 45 minutes) gives those.",
            "",
        ]
    load_start = " ".join(f"{x:g}" for x in meta["loadavg_at_start"])
    load_end = " ".join(f"{x:g}" for x in meta.get("loadavg_at_end", []))
    phases = ", ".join(f"{k} {v:.0f} s" for k, v in meta.get("phase_s", {}).items())
    lines += [
        "| | |",
        "| --- | --- |",
        f"| command | `{meta['command']}` |",
        f"| date | {meta['started_at']} |",
        f"| machine | nproc {meta['nproc']} ({meta['cpu_model']}), {meta['memory_gib']} GiB |",
        f"| load average (1/5/15 min) | at start {load_start}; at end {load_end} |",
        f"| git commit | {meta['git_commit']} |",
        *(
            f"| measured again | {', '.join(r['phases'])} at {r['git_commit']}, "
            f"{r['started_at']} (`{r['command']}`); those rows are this run's |"
            for r in meta.get("reruns", [])
        ),
        f"| software | Python {meta['python']}, PyAV {meta['pyav']}, {meta['ffmpeg']}, "
        f"tritonclient {meta['tritonclient']} |",
        f"| wall time | {meta.get('total_s', 0):.0f} s ({phases}) |",
        f"| raw JSON | {_json_link(meta.get('json'))} (every run, every sample) |",
        "",
        "## Results",
        "",
        table_md,
        "",
    ]
    if meta.get("error"):
        lines += [f"**The run stopped early**: {meta['error']}", ""]

    lines += ["## Notes per figure", ""]
    for f in figures:
        if f.notes:
            lines.append(f"- **{f.key}**: " + "; ".join(f.notes) + ".")
    lines.append("")

    lines += ["## Where the time goes", ""]
    p1 = by_key.get("P1")
    if p1 is not None and p1.extra.get("cpu_ms_per_frame"):
        cpu = p1.extra["cpu_ms_per_frame"]
        service_ms, bare_ms = cpu.get("service+triton"), cpu.get("bare loop")
        triton = p1.extra.get("triton_cpu_ms_per_frame", {})
        text = (
            f"- **P1**, CPU per frame (all threads, all processes): service {_fmt(service_ms, '')} "
            f"ms (service process {_fmt(cpu.get('service process'), '')}, Triton "
            f"{_fmt(cpu.get('triton tree'), '')}: {_breakdown(triton, '')}) against the bare "
            f"loop's {_fmt(bare_ms, '')} ms. "
        )
        if service_ms is not None and bare_ms is not None and service_ms > bare_ms:
            text += (
                f"The service spends {service_ms - bare_ms:.0f} ms more CPU per frame than the "
                "bare loop for the same model work: the transfer of each frame into Triton "
                "(gRPC, then the Python backend's shared memory, twice) and the Python-backend "
                "hops; on a machine whose cores the models already fill, that is what costs "
                "frames/s. "
            )
        else:
            text += (
                "The service spends no more CPU per frame than the bare loop; what it gains "
                "comes from overlap: its decode thread and the BLS's letterbox work on the next "
                "frame while the detector runs (2 frames in flight), which the one-thread bare "
                "loop cannot do. "
            )
        text += (
            "Frames per run: "
            + "; ".join(f"{k} {v}" for k, v in p1.extra.get("frames", {}).items())
            + "; plates read per run: "
            + "; ".join(f"{k} {v}" for k, v in p1.extra.get("plates", {}).items())
            + " (the same work on every side)."
        )
        lines.append(text)
    for key in ("P2-1", "P2-4"):
        f = by_key.get(key)
        if f is None or not f.extra:
            continue
        stages = f.extra["seed_stage_ms_per_frame"]
        serial = sum(
            v for k, v in stages.items() if not k.endswith("_http_call") and not math.isnan(v)
        )
        calls = sum(v for k, v in stages.items() if k.endswith("_http_call"))
        cpu = f.extra["cpu_ms_per_frame"]
        per_process = f.extra.get("triton_cpu_ms_per_frame", {})
        service_median = summarize(f.a).get("median")
        seed_median = summarize(f.b).get("median")
        text = f"- **{key}** ({f.title})"
        if f.ratio is not None and service_median and seed_median:
            text += (
                f": gain {f.ratio:.2f}x. One frame every {1e3 / seed_median:.0f} ms with the "
                f"seed client, every {1e3 / service_median:.0f} ms with the service (all "
                "cameras together)"
            )
        in_flight = "/".join(
            str(n) for n in sorted({n for n in f.extra.get("seed_in_flight", []) if n})
        )
        text += (
            f". The seed client keeps {in_flight or 'one per camera'} synchronous requests in "
            f"flight (enough for every model instance); per frame it spends {calls:.0f} ms in "
            "its synchronous HTTP calls (the 11 MB FP32 detector input uploaded, inference, "
            f"outputs as JSON) and {serial:.0f} ms on its own work, decoding included "
            f"({_breakdown(stages)}; thread time, summed over its threads). The service keeps "
            "2 frames per camera at Triton, so decoding, the transfer and the "
            "BLS's pre/post-processing overlap the detector, and its frame period approaches "
            "the detector's compute time"
        )
        detector = per_process.get("service", {}).get("stub:detector")
        threads = f.extra.get("detector_threads", 1)
        instances = f.extra.get("detector_instances", 1)
        if detector is not None and not math.isnan(detector):
            text += (
                f" (the detector's processes burn {detector:.0f} ms CPU per frame on "
                f"{instances} instance(s) x {threads} torch thread(s): "
                f"≈{detector / (threads * instances):.0f} ms of wall time per frame when they "
                "are all busy)"
            )
        text += (
            f". CPU per frame: {_breakdown(cpu)}; in Triton, by process: "
            + "; ".join(f"{side}: {_breakdown(v)}" for side, v in per_process.items())
            + "."
        )
        if instances > 1 and f.key == "P2-1":
            text += (
                f" The detector runs as {instances} instances of {threads} torch thread(s); "
                "the seed client has a request for each (its design, one request per camera, "
                "would leave one idle with one camera, and the gain would be that instance), so "
                "what the service gains here is what pipelining hides of the decode, the "
                "transfer, the JSON outputs and the gaps between synchronous calls."
            )
        else:
            text += (
                " With every camera's requests in flight the models keep the cores busy on "
                "both sides, so hiding the serial work and the idle gaps between synchronous "
                "calls is what the service gains here; batching across cameras pays on a GPU "
                "(bench/gpu/)."
            )
        lines.append(text)
    p3 = by_key.get("P3")
    if p3 is not None:
        parts = [f"- **P3**: ingest {_fmt(p3.ratio, '')}x ffmpeg's CPU per decoded frame."]
        for key, what in (("P3-decode", "bare PyAV decoding"), ("P3-decode_bgr", "PyAV + BGR")):
            other = by_key.get(key)
            if other is not None and other.ratio is not None:
                parts.append(f"{what} (every frame): {other.ratio:.2f}x.")
        parts.append(
            "What the ingest adds to decoding is the BGR conversion and copy of the sampled "
            "frames (1 in 3 at 5 of 15 fps) and the hand-off to asyncio; converting every frame "
            "would cost the P3-decode_bgr row."
        )
        lines.append(" ".join(parts))
    p4 = by_key.get("P4")
    if p4 is not None:
        lat = by_key.get("P4-latency")
        plot = str(p4.extra.get("plot", ""))
        ignored = plot.startswith("bench/results/")
        # Links are relative to the document's folder (both paths are relative to the project).
        doc_dir = posixpath.dirname(str(meta.get("doc", "docs/PERFORMANCE.md")))
        link = posixpath.relpath(plot, doc_dir or ".")
        lines.append(
            f"- **P4**: service RSS end/baseline {_fmt(p4.ratio, '')} ([plot]({link})"
            + (
                ", in bench/results/, which git ignores: attach it when quoting, or write it "
                "elsewhere with `--plot PATH`)"
                if ignored
                else ")"
            )
            + (
                f"; frame-to-event latency p50 {_fmt(lat.extra.get('p50_s'), 's')} s, "
                f"p99 {_fmt(lat.extra.get('p99_s'), 's')} s over {lat.extra.get('events')} "
                "events (it includes the vote's wait: a pass is reported when its reads are "
                "confident, its track ends or max_delay_s passes)"
                if lat is not None
                else ""
            )
            + "."
        )
        triton = by_key.get("P4-triton")
        slopes = {
            k: v
            for k, v in (triton.extra.get("slope_mib_per_min", {}) if triton else {}).items()
            if isinstance(v, (int, float)) and not math.isnan(v)
        }
        if triton is not None and slopes:
            label, slope = max(slopes.items(), key=lambda kv: kv[1])
            lines.append(
                f"- **P4-triton**: Triton's tree end/baseline {_fmt(triton.ratio, '')}; the "
                f"steepest trend over the second half is {label}'s, {slope:+.1f} MiB/min. "
                f"{triton.extra.get('minutes', 0):g} minutes cannot tell a slow leak from "
                "allocator growth that levels off (large numpy frames through glibc malloc "
                "in a threaded process); a longer soak does (`python -m bench --only P4 "
                "--soak-minutes 30`; one on this machine, where every process levels off, is "
                "in [production.md](production.md#memory-over-time)). If a stub keeps rising, "
                "MALLOC_ARENA_MAX=2 for the stubs and tracemalloc in the BLS are the next steps."
            )
        if plot and not ignored:
            lines += ["", f"![P4: RSS of the service and of Triton over the soak]({link})"]
    lines += report_capacity.sections(by_key, figures)
    lines.append("")

    missed = [f for f in figures if f.verdict == "MISS"]
    lines += ["## Targets missed: profile and plan", ""]
    if not missed:
        lines += ["None in this run.", ""]
    for f in missed:
        lines += [f"### {f.key}: {f.title} ({f.ratio:.2f}, target {f.target:g})", ""]
        rounds = [r for r in f.round_ratios if r > 0]
        if rounds and max(rounds) / min(rounds) > NOISY_SPREAD:
            lines += [
                f"The per-round ratios range from {min(rounds):.2f} to {max(rounds):.2f}: the "
                "load of the machine changed under this run (other jobs), and a median of so "
                "few runs does not settle it. Rerun before acting on this one.",
                "",
            ]
        if f.failed_checks:
            lines += ["A MISS whatever its ratio: " + "; ".join(f.failed_checks) + ".", ""]
        family = report_capacity.family(f.key)
        commands = PROFILE_COMMANDS.get(f.key) or report_capacity.PROFILE_COMMANDS.get(family, [])
        if commands:
            uses_profile = any("bench.profile" in c for c in commands)
            lines += [
                "How to profile it"
                + (
                    " (`bench/profile.py`: py-spy samples the process and Triton's model stubs, "
                    "prints where the samples fall and keeps the collapsed stacks under "
                    "bench/results/ for https://www.speedscope.app):"
                    if uses_profile
                    else ":"
                ),
                "",
                "```sh",
                *commands,
                "```",
                "",
            ]
        profile = f.extra.get("profile")
        if profile:
            lines += ["What the profile showed:", "", "```", profile.rstrip(), "```", ""]
        growth = f.extra.get("tracemalloc_growth")
        if growth:
            lines += ["Python allocations that grew (tracemalloc):", "", "```"]
            lines += [
                f"{g['size_diff_kib']:+10.0f} KiB {g['count_diff']:+7d} blocks  {g['where'][-1]}"
                for g in growth
            ]
            lines += ["```", ""]
        plan_text = PLANS.get(f.key) or report_capacity.PLANS.get(family)
        if plan_text:
            lines += [f"Plan: {plan_text}", ""]

    lines += [
        "## Reproduce",
        "",
        "```sh",
        "make bench                                   # = .venv/bin/python -m bench (~45 min)",
        ".venv/bin/python -m bench --quick            # smoke run, a few minutes",
        ".venv/bin/python -m bench --only P1,P3       # some phases (P1 P2 P3 P4 T R O M C)",
        ".venv/bin/python -m bench --only O --ladder 1,4,32  # another overload ladder",
        ".venv/bin/python -m bench --soak-minutes 30  # a longer soak",
        "```",
        "",
        f"Full plan (`make bench`): P1 and P2's one-camera runs share a "
        f"{full.get('one_cam_budget_s', 0):.0f} s budget (service, bare loop and seed client, "
        f"{full.get('rounds')} rounds; the clip is trimmed so that they fit, sized from a "
        f"warm-up run), P2's four-camera runs {full.get('four_cam_budget_s', 0):.0f} s, P3 "
        f"{full.get('p3_copies')} plays of the clip x {full.get('p3_rounds')} rounds, P4 "
        f"{full.get('soak_minutes', 0):g} min (shortened if the earlier phases overran, so that "
        f"the run stays within {(full.get('budget_s') or 0) / 60:g} min). One embedded Triton "
        "(`streamer.inference.embedded.server.EmbeddedTriton` on `model_repository/`, "
        "what the service "
        "starts when no URL is configured) serves every phase but R: it is started once, after "
        "P3 and R, "
        "its callee models are run once at every batch size (TorchScript optimises per input "
        "shape on the first calls), and a service run that is not counted precedes each "
        "group; the bare loop warms up the same way in its own process. "
        + report_capacity.reproduce(full),
        "",
    ]
    return "\n".join(lines)
