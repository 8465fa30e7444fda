"""CPU runtimes side by side: whole-chain frames/s through Triton, TorchScript vs OpenVINO.

    .venv/bin/python -m bench.runtimes [--rounds 3] [--frames 60] [--step 2] [--in-flight 2]
        [--input-size HxW] [--json bench/results/runtimes.json]

Builds one CPU repository per variant into a temporary folder (``converters build --runtime
torchscript``, ``--runtime openvino``, ``--runtime openvino --precision bf16`` where
OpenVINO reports bf16 on this CPU: the detector in bf16, stn and lprnet in fp32, and
``--precision int8``: the detector quantised by NNCF, stn and lprnet in fp32), same
detector input size as ``model_repository/``,
and starts an embedded Triton on each. Then, in interleaved rounds, the same decoded frames
of yard_cam.ts go through ``plate_recognition`` (the whole BLS: letterbox, detector, NMS,
crops, stn, lprnet, CTC) over one gRPC stream per pass, ``--in-flight`` frames at a time.
Reported per variant: the median frames/s over the rounds, its ratio to TorchScript's, the
server's CPU time per frame (all its processes; less sensitive than frames/s to other load on
the machine), and whether every frame's texts equal TorchScript's (boxes matched by IoU; the
lowest IoU too).
The idle servers wait on their queues while another one is measured.
``suite_rows(quick, workdir)`` is the same measurement as rows for ``python -m bench``
(``bench/runtime_rows.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from bench.common import (
    RESULTS_DIR,
    cpu_delta,
    log,
    run_meta,
    source_clip,
    summarize,
    tree_cpu_by_label,
)
from converters.model_config import DEFAULT_INPUT_HW
from converters.paths import BLS_MODEL, MODEL_REPOSITORY
from streamer.tracking.tracker import iou_matrix

OUTPUTS = ("boxes", "det_scores", "texts")

Plates = list[tuple[np.ndarray, str]]


@dataclass(frozen=True)
class Variant:
    label: str
    runtime: str
    precision: str


def variants() -> list[Variant]:
    from converters.onnx_export import cpu_supports_bf16

    found = [Variant("torchscript", "torchscript", "fp32"), Variant("openvino", "openvino", "fp32")]
    if cpu_supports_bf16():
        found.append(Variant("openvino-bf16", "openvino", "bf16"))
    else:
        log("OpenVINO reports no bf16 on this CPU: openvino-bf16 left out")
    found.append(Variant("openvino-int8", "openvino", "int8"))
    return found


def decode_frames(count: int, step: int) -> list[np.ndarray]:
    import av

    frames: list[np.ndarray] = []
    with av.open(str(source_clip())) as container:
        for index, frame in enumerate(container.decode(video=0)):
            if index % step == 0:
                frames.append(frame.to_ndarray(format="bgr24"))
            if len(frames) == count:
                break
    return frames


def run_pass(url: str, frames: Sequence[np.ndarray], in_flight: int) -> tuple[float, list[Plates]]:
    """All frames on one stream, at most ``in_flight`` unanswered; (frames/s, plates)."""
    window = threading.Semaphore(in_flight)
    done = threading.Event()
    results: dict[int, Plates] = {}
    errors: list[str] = []

    def answered(result: grpcclient.InferResult | None, error: Exception | None) -> None:
        if error is not None or result is None:
            errors.append(str(error))
        else:
            boxes = result.as_numpy("boxes")
            texts = [t.decode() for t in result.as_numpy("texts")]
            rid = int(result.get_response().id)
            results[rid] = [(boxes[i], texts[i]) for i in range(len(texts))]
        window.release()
        if len(results) + len(errors) == len(frames):
            done.set()

    client = grpcclient.InferenceServerClient(url)
    try:
        client.start_stream(callback=answered)
        started = time.perf_counter()
        for index, frame in enumerate(frames):
            window.acquire()
            tensor = grpcclient.InferInput("image", list(frame.shape), "UINT8")
            tensor.set_data_from_numpy(frame)
            client.async_stream_infer(
                BLS_MODEL,
                [tensor],
                request_id=str(index),
                outputs=[grpcclient.InferRequestedOutput(name) for name in OUTPUTS],
            )
        if not done.wait(timeout=600):
            raise RuntimeError(f"{url}: no answer for {len(frames) - len(results)} frames")
        elapsed = time.perf_counter() - started
    finally:
        client.stop_stream()
        client.close()
    if errors:
        raise RuntimeError(f"{url}: {len(errors)} frames failed, first: {errors[0]}")
    return len(frames) / elapsed, [results[i] for i in range(len(frames))]


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two boxes (x1, y1, x2, y2), by the tracker's own measure."""
    return float(iou_matrix(np.reshape(a, (1, 4)), np.reshape(b, (1, 4)))[0, 0])


def agreement(reference: list[Plates], other: list[Plates]) -> dict[str, Any]:
    """Frames whose texts (as a multiset) differ from the reference's; lowest matched IoU."""
    differing = [
        i
        for i, (a, b) in enumerate(zip(reference, other, strict=True))
        if sorted(t for _, t in a) != sorted(t for _, t in b)
    ]
    ious = [
        max((_iou(box, b) for b, _ in plates), default=0.0)
        for ref, plates in zip(reference, other, strict=True)
        for box, _ in ref
    ]
    return {
        "texts_identical": not differing,
        "frames_with_other_texts": differing,
        "differences": [
            {
                "frame": i,
                "torchscript": sorted(t for _, t in reference[i]),
                "this": sorted(t for _, t in other[i]),
            }
            for i in differing
        ],
        "plates": sum(len(p) for p in reference),
        "min_box_iou": min(ious, default=1.0),
    }


def build(variant: Variant, root: Path, input_size: str) -> Path:
    from converters.cli import main as converters_main

    out = root / variant.label / "model_repository"  # bench.common labels stubs by that path
    args = ["build", "--target", "cpu", "--runtime", variant.runtime]
    args += ["--precision", variant.precision, "--input-size", input_size, "--out", str(out)]
    log(f"building {variant.label}: converters {' '.join(args)}")
    if converters_main(args) != 0:
        raise SystemExit(f"error: building the {variant.label} repository failed")
    return out


def default_input_size() -> str:
    info = MODEL_REPOSITORY / "build_info.json"
    if info.is_file():
        height, width = json.loads(info.read_text())["input_hw"]
        return f"{height}x{width}"
    return "x".join(map(str, DEFAULT_INPUT_HW))


@dataclass(frozen=True)
class Settings:
    rounds: int = 3
    frames: int = 60
    step: int = 2
    in_flight: int = 2
    warmup: int = 4
    input_size: str = ""  # "" : the size model_repository/ was built for

    def as_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "frames": self.frames,
            "step": self.step,
            "in_flight": self.in_flight,
            "warmup": self.warmup,
            "input_size": self.input_size or default_input_size(),
        }


QUICK = Settings(rounds=2, frames=20, step=6)


def measure(settings: Settings, workdir: Path) -> list[dict[str, Any]]:
    """Build, serve and measure every variant (repositories under ``workdir``); one row each."""
    import logging

    from streamer.inference.embedded.server import EmbeddedTriton

    logging.getLogger("streamer.inference.embedded.server").setLevel(logging.WARNING)
    input_size = settings.input_size or default_input_size()
    frames = decode_frames(settings.frames, settings.step)
    log(f"{len(frames)} frames of {source_clip().name} (every {settings.step}th), {input_size}")
    chosen = variants()
    fps: dict[str, list[float]] = {v.label: [] for v in chosen}
    cpu_ms: dict[str, dict[str, list[float]]] = {v.label: {} for v in chosen}
    plates: dict[str, list[Plates]] = {}
    servers = {}
    try:
        for variant in chosen:
            server = EmbeddedTriton(build(variant, workdir, input_size))
            server.start()
            servers[variant.label] = server
            run_pass(server.grpc_url, frames[: settings.warmup], settings.in_flight)
        for round_index in range(settings.rounds):
            # Interleaved, and the order rotates: drift in machine load hits every variant.
            shift = round_index % len(chosen)
            for variant in chosen[shift:] + chosen[:shift]:
                server = servers[variant.label]
                before = tree_cpu_by_label(server.pid)
                rate, read = run_pass(server.grpc_url, frames, settings.in_flight)
                used = cpu_delta(before, tree_cpu_by_label(server.pid))
                used["all"] = sum(used.values())
                for label, seconds in used.items():
                    per_frame = cpu_ms[variant.label].setdefault(label, [])
                    per_frame.append(1000 * seconds / len(frames))
                fps[variant.label].append(rate)
                plates[variant.label] = read
                log(
                    f"round {round_index + 1}: {variant.label} {rate:.2f} frames/s, "
                    f"server CPU {cpu_ms[variant.label]['all'][-1]:.0f} ms/frame"
                )
    finally:
        for server in servers.values():
            server.stop()

    baseline = statistics.median(fps["torchscript"])
    rows = []
    for variant in chosen:
        median = statistics.median(fps[variant.label])
        rows.append(
            {
                "variant": variant.label,
                "runtime": variant.runtime,
                "precision": variant.precision,
                "frames": len(frames),
                "frames_per_s": summarize(fps[variant.label]),
                "ratio_to_torchscript": median / baseline,
                "server_cpu_ms_per_frame": {
                    label: summarize(values) for label, values in cpu_ms[variant.label].items()
                },
                **agreement(plates["torchscript"], plates[variant.label]),
            }
        )
    return rows


def suite_rows(quick: bool, workdir: Path) -> list[dict[str, Any]]:
    """The hook of ``bench/runtime_rows.py`` (phase R of ``python -m bench``)."""
    return measure(QUICK if quick else Settings(), workdir)


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'variant':<15} {'frames/s':>9} {'x TorchScript':>14} {'CPU ms/frame':>13}"
        "  texts vs TorchScript"
    )
    for row in rows:
        same = (
            "identical"
            if row["texts_identical"]
            else f"differ in {len(row['frames_with_other_texts'])} of {row['frames']} frames"
        )
        cpu = row["server_cpu_ms_per_frame"]["all"]["median"]
        print(
            f"{row['variant']:<15} {row['frames_per_s']['median']:>9.2f} "
            f"{row['ratio_to_torchscript']:>13.2f}x {cpu:>13.0f}  {same} "
            f"(min box IoU {row['min_box_iou']:.3f})"
        )


def main(argv: list[str] | None = None) -> int:
    defaults = Settings()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=defaults.rounds)
    parser.add_argument("--frames", type=int, default=defaults.frames, help="frames per pass")
    parser.add_argument(
        "--step", type=int, default=defaults.step, help="every STEP-th frame of the clip"
    )
    parser.add_argument("--in-flight", type=int, default=defaults.in_flight)
    parser.add_argument(
        "--warmup", type=int, default=defaults.warmup, help="untimed frames per server"
    )
    parser.add_argument("--input-size", default=default_input_size())
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "runtimes.json")
    args = parser.parse_args(argv)
    if min(args.rounds, args.frames, args.step, args.in_flight) < 1 or args.warmup < 0:
        print(
            "error: --rounds, --frames, --step and --in-flight must be >= 1, --warmup >= 0",
            file=sys.stderr,
        )
        return 1
    settings = Settings(
        args.rounds, args.frames, args.step, args.in_flight, args.warmup, args.input_size
    )
    meta = run_meta(sys.argv if argv is None else ["bench.runtimes", *argv])
    with tempfile.TemporaryDirectory(prefix="bench-runtimes-") as tmp:
        rows = measure(settings, Path(tmp))
    print_table(rows)
    report = {"meta": meta, "settings": settings.as_dict(), "results": rows}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
