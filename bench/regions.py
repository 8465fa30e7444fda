"""The detector on regions around motion and live plates vs on whole frames: the whole chain.

    .venv/bin/python -m bench.regions [--rounds 3] [--cameras 2] [--copies 3]
        [--kinds busy,gated] [--json bench/results/regions.json]

One embedded CPU Triton on ``model_repository/`` (built with its region detector, `make
models`). The service itself (``streamer.app.Service``, in this process, bench/service_run.py)
plays ``--cameras`` file cameras once as fast as possible (``realtime: false``, sample_fps 5,
the default two frames in flight per camera), each yard_cam.ts from its own offset looped
``--copies`` times. Per kind of camera, in interleaved rounds (whole, regions, whole, ...),
the same run with ``motion.regions`` off (every frame detected whole: the service before
regions) and on (the default):

* ``busy``: ``motion.enabled: false``: a camera the gate cannot skip, every sampled frame
  sent (the motion check still runs, for the regions);
* ``gated``: ``motion.enabled: true``: the default camera; the yard's still stretch skipped.

Reported per kind and path: whole-chain frames/s (frames answered over the wall time of the
run: connect, play, drain, stop), CPU ms per frame of this process and of Triton's tree, how
many frames Triton detected on regions (its statistics: requests to ``detector_region`` and
to ``detector``), and the event texts of each run; a kind passes only with the same texts.
``figure`` makes the suite's D rows, one per kind (``python -m bench``).
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from bench.clips import offsets, rotated_clip
from bench.common import (
    RESULTS_DIR,
    Figure,
    count_frames,
    inference_counts,
    log,
    loop_clip,
    source_clip,
    write_result,
)
from bench.service_run import ServiceSpec, run_service
from converters.paths import MODEL_REPOSITORY
from streamer.inference.embedded.server import EmbeddedTriton

KINDS = {"busy": False, "gated": True}  # kind -> motion.enabled
PATHS = ("whole", "regions")
SAMPLE_FPS = 5.0
DETECTORS = ("detector", "detector_region")


def _requests(url: str) -> dict[str, int]:
    return inference_counts(url, *DETECTORS)


def clips(cameras: int, copies: int, folder: Path) -> list[Path]:
    """One clip per camera: yard_cam.ts from its own offset, looped ``copies`` times."""
    folder.mkdir(parents=True, exist_ok=True)
    source = source_clip()
    out = []
    for offset in offsets(count_frames(source), cameras):
        rotated = folder / f"offset-{offset}.ts"
        if not rotated.exists():
            rotated_clip(source, offset, rotated)
        looped = folder / f"offset-{offset}-x{copies}.ts"
        out.append(looped if looped.exists() else loop_clip(rotated, copies, looped))
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    work = args.workdir
    cams = clips(args.cameras, args.copies, work / "clips")
    server = EmbeddedTriton(MODEL_REPOSITORY)
    server.start()
    results: dict[str, Any] = {}
    try:
        if not (MODEL_REPOSITORY / "detector_region").is_dir():
            raise SystemExit("model_repository/ has no region detector: run `make models`")
        for kind, gating in KINDS.items():
            if kind not in args.kinds:
                continue
            rows: dict[str, dict[str, list[Any]]] = {p: {} for p in PATHS}
            for round_ in range(args.rounds):
                for path in PATHS:
                    motion = {"enabled": gating, "regions": path == "regions"}
                    spec = ServiceSpec(
                        clips=cams,
                        triton_url=server.grpc_url,
                        sample_fps=SAMPLE_FPS,
                        camera_extra={"motion": motion},
                    )
                    before = _requests(server.grpc_url)
                    run = run_service(spec, work / f"{kind}-{path}-{round_}", server.pid)
                    after = _requests(server.grpc_url)
                    row = rows[path]
                    for key in ("frames_per_s", "frames", "service_cpu_s", "triton_cpu_s"):
                        row.setdefault(key, []).append(run[key])
                    for model in DETECTORS:
                        row.setdefault(model, []).append(after[model] - before[model])
                    row.setdefault("event_texts", []).append(sorted(map(tuple, run["event_texts"])))
                    log(
                        f"{kind} round {round_ + 1} {path}: {run['frames_per_s']:.2f} frames/s, "
                        f"{run['frames']} frames, whole {after['detector'] - before['detector']},"
                        f" windows {after['detector_region'] - before['detector_region']}"
                    )
            results[kind] = _summary(rows)
    finally:
        server.stop()
    return {"kinds": results, "cameras": args.cameras, "copies": args.copies}


def _summary(rows: dict[str, dict[str, list[Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {"paths": rows}
    for row in rows.values():
        frames = sum(row["frames"])
        row["median_frames_per_s"] = statistics.median(row["frames_per_s"])
        row["service_cpu_ms_per_frame"] = 1000 * sum(row["service_cpu_s"]) / frames
        row["triton_cpu_ms_per_frame"] = 1000 * sum(row["triton_cpu_s"]) / frames
        row["whole_frame_detections_per_frame"] = sum(row["detector"]) / frames
        row["windows_per_frame"] = sum(row["detector_region"]) / frames
    texts = {p: [Counter(t) for t in rows[p]["event_texts"]] for p in PATHS}
    baseline = texts["whole"][0]
    out["runs_with_other_texts"] = {
        p: sum(t != baseline for t in runs) for p, runs in texts.items()
    }
    out["speedup"] = rows["regions"]["median_frames_per_s"] / rows["whole"]["median_frames_per_s"]
    return out


def report(result: dict[str, Any]) -> str:
    lines = [
        "| camera | path | frames/s | service CPU ms/frame | Triton CPU ms/frame | "
        "whole-frame detections per frame | region windows per frame | runs with other texts |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind, summary in result["kinds"].items():
        for path, row in summary["paths"].items():
            lines.append(
                f"| {kind} | {path} | {row['median_frames_per_s']:.2f} | "
                f"{row['service_cpu_ms_per_frame']:.1f} | {row['triton_cpu_ms_per_frame']:.0f} | "
                f"{row['whole_frame_detections_per_frame']:.2f} | "
                f"{row['windows_per_frame']:.2f} | {summary['runs_with_other_texts'][path]} |"
            )
    for kind, summary in result["kinds"].items():
        lines.append(f"\n{kind}: regions / whole frames/s {summary['speedup']:.2f}x")
    return "\n".join(lines)


def figure(result: dict[str, Any], command: str, kind: str = "busy") -> Figure:
    """The suite's D row of ``kind``: regions over whole frames, frames/s per round; it
    passes only with the same event texts in every run."""
    summary = result["kinds"][kind]
    whole, regions = summary["paths"]["whole"], summary["paths"]["regions"]
    other = sum(summary["runs_with_other_texts"].values())
    checks = [f"event texts differ in {other} run(s)"] if other else []
    return Figure(
        key=f"D-{kind}",
        title=f"detector on regions vs whole frames, {kind} cameras (whole-chain frames/s)",
        numerator="whole-chain frames/s, motion.regions on (the default)",
        denominator="whole-chain frames/s, the same run with motion.regions off",
        unit="frames/s",
        a=list(regions["frames_per_s"]),
        b=list(whole["frames_per_s"]),
        target=1.5,
        higher_is_better=True,
        notes=[
            f"`{command}`: the service on {result['cameras']} file cameras played once as fast "
            f"as possible, yard_cam.ts from its own offset looped {result['copies']} times, "
            f"motion.enabled {str(KINDS[kind]).lower()}; the two paths alternate in each round",
            f"per frame: whole-frame detections {whole['whole_frame_detections_per_frame']:.2f}"
            f" -> {regions['whole_frame_detections_per_frame']:.2f}, region windows "
            f"{regions['windows_per_frame']:.2f} (480x480, a quarter of a 736x1280 pass each)",
            f"CPU ms per frame, Triton's tree: {whole['triton_cpu_ms_per_frame']:.0f} -> "
            f"{regions['triton_cpu_ms_per_frame']:.0f}; the service: "
            f"{whole['service_cpu_ms_per_frame']:.1f} -> {regions['service_cpu_ms_per_frame']:.1f}",
        ],
        extra={"regions": {k: v for k, v in result.items() if k != "meta"}},
        failed_checks=checks,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cameras", type=int, default=2)
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--workdir", type=Path, default=RESULTS_DIR / "regions-work")
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "regions.json")
    args = parser.parse_args(argv)
    args.kinds = args.kinds.split(",")
    if unknown := set(args.kinds) - set(KINDS):
        parser.error(f"--kinds: unknown {sorted(unknown)}; use {list(KINDS)}")
    if args.rounds < 1 or args.cameras < 1 or args.copies < 1:
        parser.error("--rounds, --cameras and --copies must be at least 1")
    result = measure(args)
    write_result(result, args.json, argv)
    print(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
