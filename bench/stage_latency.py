"""Per-stage latency of the plate pipeline, in-process (torch) and through the embedded Triton.

    .venv/bin/python bench/stage_latency.py [--runs 20] [--warmup 3] [--frames 40] [--json PATH]

Part 1, in-process: this process runs the TorchScript files of ``model_repository/`` with
``torch.set_num_threads(2)`` and ``plate_ops`` on car.jpg resized to 1920x1080, stage by stage
(each stage timed on the previous stage's output), then the whole chain.

Part 2, through Triton: an :class:`EmbeddedTriton` on ``model_repository/`` is started only
after part 1 is done (the two would compete for the cores). The callee models are timed with
the sync gRPC client, the decoupled ``plate_recognition`` BLS with a gRPC stream, one request
at a time; then its throughput with K frames in flight on one stream over frames of
yard_cam.ts (decoded before the server starts, outside the timing).

Every latency: ``--warmup`` runs not counted, then ``--runs`` timed runs; median, p90, min and
max in milliseconds. Figures are what this machine measured at that moment: nothing here is
asserted.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import queue
import re
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import torch
import tritonclient.grpc as grpcclient
from tritonclient.grpc import InferInput, InferRequestedOutput, InferResult
from tritonclient.utils import InferenceServerException

from converters import assets
from converters.paths import MODEL_REPOSITORY, import_plate_ops
from streamer.foundation.paths import BLS_MODEL
from streamer.inference.embedded.server import EmbeddedTriton

warnings.filterwarnings("ignore", message="`torch.jit", category=FutureWarning)

plate_ops = import_plate_ops()

THREADS = 2
FRAME_WH = (1920, 1080)
BLS_OUTPUTS = ("boxes", "det_scores", "texts", "text_scores")
IN_FLIGHT = (1, 4)
STREAM_TIMEOUT_S = 120.0
EXPECTED_CAR_PLATES = 3


@dataclass
class Measurement:
    """Raw samples of one timed operation, in milliseconds."""

    part: str
    stage: str
    samples_ms: list[float]

    def summary(self) -> dict[str, float]:
        a = np.asarray(self.samples_ms, dtype=np.float64)
        return {
            "median_ms": float(np.median(a)),
            "p90_ms": float(np.percentile(a, 90)),
            "min_ms": float(a.min()),
            "max_ms": float(a.max()),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "part": self.part,
            "stage": self.stage,
            "runs": len(self.samples_ms),
            **self.summary(),
            "samples_ms": self.samples_ms,
        }


@dataclass
class Throughput:
    """``frames`` requests on one stream with ``in_flight`` outstanding at any time."""

    in_flight: int
    frames: int
    wall_s: float
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def fps(self) -> float:
        return self.frames / self.wall_s

    def as_dict(self) -> dict[str, Any]:
        lat = np.asarray(self.latencies_ms, dtype=np.float64)
        return {
            "in_flight": self.in_flight,
            "frames": self.frames,
            "wall_s": self.wall_s,
            "frames_per_s": self.fps,
            "latency_median_ms": float(np.median(lat)),
            "latency_p90_ms": float(np.percentile(lat, 90)),
            "latencies_ms": self.latencies_ms,
        }


@dataclass(frozen=True)
class PipelineParams:
    """What the BLS is configured with, so that the in-process chain does the same work."""

    input_hw: tuple[int, int]
    head_layout: str
    conf_threshold: float
    iou_threshold: float
    max_plates: int
    crop_pad_ratio: float


def load_params(repository: Path) -> PipelineParams:
    """Input size from ``build_info.json``; thresholds from the BLS ``config.pbtxt``."""
    info = json.loads((repository / "build_info.json").read_text())
    text = (repository / BLS_MODEL / "config.pbtxt").read_text()
    found = dict(re.findall(r'key:\s*"(\w+)",\s*value:\s*\{\s*string_value:\s*"([^"]*)"', text))
    return PipelineParams(
        input_hw=(int(info["input_hw"][0]), int(info["input_hw"][1])),
        head_layout=found.get("detector_head_layout", info.get("detector_layout", "auto")),
        conf_threshold=float(found.get("conf_threshold", "0.25")),
        iou_threshold=float(found.get("iou_threshold", "0.45")),
        max_plates=int(found.get("max_plates", "16")),
        crop_pad_ratio=float(found.get("crop_pad_ratio", str(plate_ops.CROP_PAD_RATIO))),
    )


def timed(fn: Callable[[], object], runs: int, warmup: int) -> list[float]:
    """Call ``fn`` ``warmup`` times untimed, then ``runs`` times; milliseconds per call."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def media(name: str) -> Path:
    return assets.verify(assets.asset(name), assets.default_assets_dir())


def car_frame() -> np.ndarray:
    image = cv2.imread(str(media("car.jpg")))
    if image is None:
        raise SystemExit("cannot read car.jpg")
    return cv2.resize(image, FRAME_WH, interpolation=cv2.INTER_AREA)


def yard_frames(count: int) -> list[np.ndarray]:
    """The first ``count`` frames of yard_cam.ts, BGR."""
    frames: list[np.ndarray] = []
    with av.open(str(media("yard_cam.ts"))) as container:
        for frame in container.decode(video=0):
            frames.append(frame.to_ndarray(format="bgr24"))
            if len(frames) == count:
                return frames
    raise SystemExit(f"yard_cam.ts has only {len(frames)} frames, --frames {count} asked")


# -- part 1: in-process ---------------------------------------------------------------------


def run_in_process(
    repository: Path, params: PipelineParams, frame: np.ndarray, runs: int, warmup: int
) -> tuple[list[Measurement], list[str]]:
    torch.set_num_threads(THREADS)
    load = {
        name: torch.jit.load(str(repository / name / "1" / "model.pt"), map_location="cpu").eval()
        for name in ("detector", "stn", "lprnet")
    }
    detector, stn, lprnet = load["detector"], load["stn"], load["lprnet"]

    def forward(module: torch.jit.ScriptModule, batch: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            out = module(torch.from_numpy(batch))
        if isinstance(out, (tuple, list)):
            out = out[0]
        return out.contiguous().numpy()

    frame_hw = (frame.shape[0], frame.shape[1])

    def letterbox() -> tuple[np.ndarray, Any]:
        return plate_ops.letterbox(frame, params.input_hw)

    def postprocess(head: np.ndarray, transform: Any) -> Any:
        dets = plate_ops.decode_head(head, params.conf_threshold, params.head_layout)
        dets = plate_ops.non_max_suppression(dets, params.iou_threshold, params.max_plates)
        dets.boxes = plate_ops.unletterbox_boxes(dets.boxes, transform, frame_hw)
        return dets

    def crop(boxes: np.ndarray) -> np.ndarray:
        return plate_ops.crop_plates(frame, boxes, params.crop_pad_ratio)

    def chain() -> list[str]:
        tensor, transform = letterbox()
        dets = postprocess(forward(detector, tensor[None])[0], transform)
        if len(dets) == 0:
            return []
        logits = forward(lprnet, forward(stn, crop(dets.boxes)))
        return plate_ops.ctc_greedy_decode(logits)[0]

    # One reference pass: each stage is then timed on its predecessor's real output.
    tensor, transform = letterbox()
    batch = np.ascontiguousarray(tensor[None])
    head = forward(detector, batch)
    dets = postprocess(head[0], transform)
    crops = crop(dets.boxes)
    straightened = forward(stn, crops)
    logits = forward(lprnet, straightened)
    texts, _ = plate_ops.ctc_greedy_decode(logits)
    n = len(dets)

    in_h, in_w = params.input_hw
    part = "in-process"
    stages: list[tuple[str, Callable[[], object]]] = [
        (f"letterbox {FRAME_WH[0]}x{FRAME_WH[1]} -> {in_w}x{in_h}", letterbox),
        (f"detector forward [1,3,{in_h},{in_w}]", lambda: forward(detector, batch)),
        ("postprocess (decode+NMS+unletterbox)", lambda: postprocess(head[0], transform)),
        (f"crop {n} plates", lambda: crop(dets.boxes)),
        (f"stn forward [{n},3,24,94]", lambda: forward(stn, crops)),
        (f"lprnet forward [{n},3,24,94]", lambda: forward(lprnet, straightened)),
        (f"CTC decode [{n},23,18]", lambda: plate_ops.ctc_greedy_decode(logits)),
        ("whole chain", chain),
    ]
    results = []
    for name, fn in stages:
        results.append(Measurement(part, name, timed(fn, runs, warmup)))
        print(f"  measured {part}: {name}", file=sys.stderr, flush=True)
    return results, texts


# -- part 2: through Triton -----------------------------------------------------------------


def fp32_input(array: np.ndarray) -> InferInput:
    tensor = InferInput("INPUT__0", list(array.shape), "FP32")
    tensor.set_data_from_numpy(np.ascontiguousarray(array, dtype=np.float32))
    return tensor


class BlsStream:
    """The sync client's gRPC stream to the decoupled BLS; responses go through a queue."""

    def __init__(self, client: grpcclient.InferenceServerClient) -> None:
        self.client = client
        self.responses: queue.Queue[
            tuple[float, InferResult | None, InferenceServerException | None]
        ] = queue.Queue()
        self.sent: dict[str, float] = {}
        self.count = 0
        client.start_stream(callback=self._callback, stream_timeout=None)

    def _callback(self, result: InferResult | None, error: InferenceServerException | None) -> None:
        self.responses.put((time.perf_counter(), result, error))

    def send(self, frame: np.ndarray) -> str:
        tensor = InferInput("image", list(frame.shape), "UINT8")
        tensor.set_data_from_numpy(frame)
        self.count += 1
        rid = f"bench-{self.count}"
        self.sent[rid] = time.perf_counter()
        self.client.async_stream_infer(
            BLS_MODEL,
            [tensor],
            request_id=rid,
            outputs=[InferRequestedOutput(name) for name in BLS_OUTPUTS],
        )
        return rid

    def receive(self) -> tuple[InferResult, float]:
        """The next final response and its latency in ms since its request was sent."""
        try:
            received, result, error = self.responses.get(timeout=STREAM_TIMEOUT_S)
        except queue.Empty:
            raise SystemExit(f"{BLS_MODEL}: no response in {STREAM_TIMEOUT_S:.0f} s") from None
        if error is not None or result is None:
            raise SystemExit(f"{BLS_MODEL} failed: {error}")
        rid = result.get_response().id
        return result, (received - self.sent.pop(rid)) * 1e3

    def one(self, frame: np.ndarray) -> InferResult:
        self.send(frame)
        return self.receive()[0]

    def throughput(self, frames: Sequence[np.ndarray], in_flight: int) -> Throughput:
        """Send ``frames`` keeping ``in_flight`` requests outstanding; wall time and latencies."""
        latencies: list[float] = []
        pending = iter(frames)
        start = time.perf_counter()
        outstanding = 0
        for frame in pending:
            self.send(frame)
            outstanding += 1
            if outstanding == in_flight:
                break
        while outstanding:
            _, latency = self.receive()
            latencies.append(latency)
            outstanding -= 1
            frame = next(pending, None)
            if frame is not None:
                self.send(frame)
                outstanding += 1
        return Throughput(in_flight, len(frames), time.perf_counter() - start, latencies)

    def close(self) -> None:
        self.client.stop_stream()


def run_triton(
    repository: Path,
    params: PipelineParams,
    frame: np.ndarray,
    yard: list[np.ndarray],
    runs: int,
    warmup: int,
) -> tuple[list[Measurement], list[Throughput], list[str], float]:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("streamer.inference.embedded.server").setLevel(logging.WARNING)
    tensor, transform = plate_ops.letterbox(frame, params.input_hw)
    batch = np.ascontiguousarray(tensor[None])
    in_h, in_w = params.input_hw
    part = "triton"

    started = time.perf_counter()
    with EmbeddedTriton(repository) as server:
        startup_s = time.perf_counter() - started
        print(f"  Triton ready in {startup_s:.1f} s", file=sys.stderr, flush=True)
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:

            def infer(model: str, array: np.ndarray) -> np.ndarray:
                result = client.infer(
                    model, [fp32_input(array)], outputs=[InferRequestedOutput("OUTPUT__0")]
                )
                out = result.as_numpy("OUTPUT__0")
                assert out is not None
                return out

            head = infer("detector", batch)
            dets = plate_ops.non_max_suppression(
                plate_ops.decode_head(head[0], params.conf_threshold, params.head_layout),
                params.iou_threshold,
                params.max_plates,
            )
            dets.boxes = plate_ops.unletterbox_boxes(
                dets.boxes, transform, (frame.shape[0], frame.shape[1])
            )
            crops = plate_ops.crop_plates(frame, dets.boxes, params.crop_pad_ratio)
            straightened = infer("stn", crops)
            n = len(crops)

            results: list[Measurement] = []
            callees: list[tuple[str, Callable[[], object]]] = [
                (f"detector [1,3,{in_h},{in_w}] (gRPC)", lambda: infer("detector", batch)),
                (f"stn [{n},3,24,94] (gRPC)", lambda: infer("stn", crops)),
                (f"lprnet [{n},3,24,94] (gRPC)", lambda: infer("lprnet", straightened)),
            ]
            for name, fn in callees:
                results.append(Measurement(part, name, timed(fn, runs, warmup)))
                print(f"  measured {part}: {name}", file=sys.stderr, flush=True)

            stream = BlsStream(client)
            try:
                first = stream.one(frame)
                texts_raw = first.as_numpy("texts")
                texts = [t.decode() for t in texts_raw] if texts_raw is not None else []
                name = f"{BLS_MODEL} {FRAME_WH[0]}x{FRAME_WH[1]} (stream, 1 in flight)"
                results.append(
                    Measurement(part, name, timed(lambda: stream.one(frame), runs, warmup))
                )
                print(f"  measured {part}: {name}", file=sys.stderr, flush=True)
                rates = []
                for k in IN_FLIGHT:
                    rates.append(stream.throughput(yard, k))
                    print(f"  measured throughput K={k}", file=sys.stderr, flush=True)
            finally:
                stream.close()
        finally:
            client.close()
    return results, rates, texts, startup_s


# -- report ---------------------------------------------------------------------------------


def print_table(
    measurements: Sequence[Measurement], rates: Sequence[Throughput], yard_wh: str
) -> None:
    width = max(len(m.stage) for m in measurements)
    header = (
        f"{'part':<11} {'stage':<{width}} {'runs':>4} "
        f"{'median':>9} {'p90':>9} {'min':>9} {'max':>9}  (ms)"
    )
    print(header)
    print("-" * len(header))
    for m in measurements:
        s = m.summary()
        print(
            f"{m.part:<11} {m.stage:<{width}} {len(m.samples_ms):>4} "
            f"{s['median_ms']:>9.1f} {s['p90_ms']:>9.1f} {s['min_ms']:>9.1f} {s['max_ms']:>9.1f}"
        )
    if rates:
        print()
        print(
            f"throughput: {BLS_MODEL}, one stream, {rates[0].frames} frames of yard_cam.ts "
            f"({yard_wh})"
        )
        for r in rates:
            lat = r.as_dict()
            print(
                f"  K={r.in_flight} in flight: {r.fps:6.2f} frames/s  "
                f"({r.wall_s:.1f} s; latency median {lat['latency_median_ms']:.0f} ms, "
                f"p90 {lat['latency_p90_ms']:.0f} ms)"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per measurement")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs before those")
    parser.add_argument("--frames", type=int, default=40, help="yard_cam.ts frames per K")
    parser.add_argument("--json", type=Path, help="write raw samples and summaries here")
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0 or args.frames < max(IN_FLIGHT):
        parser.error("need --runs >= 1, --warmup >= 0, --frames >= max K")
    repository: Path = args.repository.absolute()
    if not (repository / "build_info.json").is_file():
        parser.error(f"{repository} is not built: run `make models`")
    if not (repository / "detector" / "1" / "model.pt").is_file():
        parser.error(
            f"{repository} has no TorchScript files (built with --runtime openvino?); this "
            "script times TorchScript: `python -m converters build --target cpu --runtime "
            "torchscript --input-size 736x1280 --out DIR`, then --repository DIR"
        )

    began = time.perf_counter()
    params = load_params(repository)
    in_h, in_w = params.input_hw
    meta = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "cpu_count": os.cpu_count(),
        "loadavg_at_start": list(os.getloadavg()),
        "torch": torch.__version__,
        "torch_threads": THREADS,
        "opencv": cv2.__version__,
        "python": platform.python_version(),
        "input_hw": [in_h, in_w],
        "head_layout": params.head_layout,
        "frame_wh": list(FRAME_WH),
        "runs": args.runs,
        "warmup": args.warmup,
        "frames": args.frames,
        "in_flight": list(IN_FLIGHT),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    print(f"command: {meta['command']}")
    print(
        f"cpu_count: {meta['cpu_count']}   load average at start: "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    print(f"torch {torch.__version__} ({THREADS} threads in-process), OpenCV {cv2.__version__}")
    print(
        f"detector input: {in_h}x{in_w} (HxW), head {params.head_layout}; "
        f"runs {args.runs} after {args.warmup} warm-up"
    )
    sys.stdout.flush()

    frame = car_frame()
    print("part 1: in-process", file=sys.stderr, flush=True)
    local, local_texts = run_in_process(repository, params, frame, args.runs, args.warmup)

    yard = yard_frames(args.frames)  # decoded before the server starts, outside any timing
    yard_wh = f"{yard[0].shape[1]}x{yard[0].shape[0]}"
    print("part 2: through Triton", file=sys.stderr, flush=True)
    remote, rates, remote_texts, startup_s = run_triton(
        repository, params, frame, yard, args.runs, args.warmup
    )
    total_s = time.perf_counter() - began

    print()
    print_table([*local, *remote], rates, yard_wh)
    print()
    note = "" if len(local_texts) == EXPECTED_CAR_PLATES else f" (expected {EXPECTED_CAR_PLATES})"
    print(f"car.jpg plates in-process: {len(local_texts)}{note} {local_texts}")
    print(f"car.jpg plates via {BLS_MODEL}: {len(remote_texts)} {remote_texts}")
    print(f"Triton start-up: {startup_s:.1f} s; total run time: {total_s:.1f} s")

    if args.json:
        meta["triton_startup_s"] = startup_s
        meta["total_s"] = total_s
        report = {
            "meta": meta,
            "plates": {"in_process": local_texts, "triton": remote_texts},
            "latency": [m.as_dict() for m in (*local, *remote)],
            "throughput": [r.as_dict() for r in rates],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"raw numbers: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
