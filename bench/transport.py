"""Frames to Triton as BGR or as their YUV 4:2:0 planes: bytes, copies, frames/s and CPU.

    .venv/bin/python -m bench.transport [--rounds 3] [--frames 60] [--step 2] [--cameras 4]
        [--json bench/results/transport.json]

One embedded CPU Triton on ``model_repository/``. In interleaved rounds (BGR, YUV, BGR, YUV,
...) the same frames of yard_cam.ts go through the product's own client
(``PlateRecognizer``: one gRPC stream, the fair window), the decode included: each pass
decodes the clip afresh with PyAV in a worker thread, keeps every ``--step``-th frame and
hands the decoded picture over as the service does (a ``Frame`` holding the ``VideoFrame``),
spread over ``--cameras`` cameras so the window can hold several frames. The BGR pass is the
client told that the model has no ``image_i420`` input (what a model repository older than it
gets); everything else is the same.

Reported per path: the gRPC request's bytes per frame (the serialised ``ModelInferRequest``),
the bytes the streamer writes per frame to get there (counted from the code path, see
:data:`STREAMER_WRITES`), frames/s (median over the rounds), CPU per frame of this process
(decode included) and of the Triton tree, and in how many frames the two paths read the same
texts. ``figure`` makes the suite's T row of it (``python -m bench``, bench/run_all.py).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
from tritonclient.grpc._utils import _get_inference_request

from bench.common import (
    RESULTS_DIR,
    Figure,
    cpu_delta,
    log,
    self_cpu_s,
    source_clip,
    tree_cpu_by_label,
    write_result,
)
from converters.paths import MODEL_REPOSITORY
from streamer.config import TritonConfig
from streamer.domain.frames import Frame
from streamer.foundation.paths import BLS_MODEL
from streamer.inference.client import PlateRecognizer
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.inference.messages import frame_request, image_input
from streamer.inference.scheduler import scheduler_for

PATHS = ("bgr", "yuv")
#: What the streamer writes per 1080p frame on each path, from the code: the BGR conversion
#: (swscale, 6.2 MB) or the planes' copy out of the decoder (``to_ndarray``, 3.1 MB); the
#: tensor's ``tobytes`` (the same again); the gRPC message's serialisation (the same again).
STREAMER_WRITES = {
    "bgr": ("bgr24 conversion", "tobytes", "serialisation"),
    "yuv": ("planes copied", "tobytes", "serialisation"),
}


def _pictures(step: int, count: int) -> Iterator[tuple[int, av.VideoFrame]]:
    with av.open(str(source_clip())) as container:
        kept = 0
        for index, picture in enumerate(container.decode(video=0)):
            if index % step == 0:
                yield index, picture
                kept += 1
                if kept == count:
                    return


def request_bytes(frame: Frame, i420: bool) -> int:
    """The size of the serialised gRPC request of ``frame`` on one path."""
    request = frame_request(BLS_MODEL, "cam:0:0", image_input(frame, i420))
    message = _get_inference_request(
        model_name=request["model_name"],
        inputs=request["inputs"],
        model_version="",
        request_id=request["request_id"],
        outputs=request["outputs"],
        sequence_id=0,
        sequence_start=False,
        sequence_end=False,
        priority=0,
        timeout=1_000_000,
        parameters=request["parameters"],
    )
    return int(message.ByteSize())


async def run_pass(
    recognizer: PlateRecognizer, path: str, args: argparse.Namespace
) -> tuple[float, list[list[str]]]:
    """One pass of ``path``: decode and send every kept frame; (seconds, texts per frame)."""
    # (the BGR path: as for a model without image_i420)
    recognizer.inputs = dataclasses.replace(recognizer.inputs, i420=path == "yuv")
    pictures = _pictures(args.step, args.frames)
    tasks: list[asyncio.Task[Any]] = []
    started = time.perf_counter()
    while (item := await asyncio.to_thread(next, pictures, None)) is not None:
        index, picture = item
        camera = f"cam-{len(tasks) % args.cameras}"
        frame = Frame(camera, index, index / 15, time.time(), time.monotonic(), picture)
        permit = await recognizer.acquire(camera)  # the window bounds the frames decoded ahead
        tasks.append(asyncio.create_task(recognizer.recognise(frame, permit)))
    answers = await asyncio.gather(*tasks)
    seconds = time.perf_counter() - started
    return seconds, [sorted(p.text for p in plates) for plates in answers]


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    server = EmbeddedTriton(MODEL_REPOSITORY)
    await server.astart()
    config = TritonConfig(request_timeout_s=120)
    recognizer = PlateRecognizer(
        server.grpc_url, scheduler=scheduler_for(config), request_timeout_s=120
    )
    await recognizer.start()
    results: dict[str, Any] = {
        p: {"seconds": [], "self_cpu_s": [], "triton_cpu_s": []} for p in PATHS
    }
    texts: dict[str, list[list[str]]] = {}
    try:
        await recognizer.wait_ready(60)
        if not recognizer.inputs.i420:
            raise SystemExit("error: model_repository/ has no image_i420 input: make models")
        _, sample = next(_pictures(1, 1))
        for path in PATHS:  # a Frame each: the BGR path keeps its conversion in the Frame
            frame = Frame("cam", 0, 0.0, 0.0, 0.0, sample)
            results[path]["request_bytes"] = request_bytes(frame, path == "yuv")
            results[path]["streamer_writes"] = list(STREAMER_WRITES[path])
        await run_pass(recognizer, "yuv", argparse.Namespace(**{**vars(args), "frames": 6}))
        for round_ in range(args.rounds):
            for path in PATHS if round_ % 2 == 0 else PATHS[::-1]:
                cpu, triton = self_cpu_s(), tree_cpu_by_label(server.pid)
                seconds, read = await run_pass(recognizer, path, args)
                triton_s = sum(cpu_delta(triton, tree_cpu_by_label(server.pid)).values())
                results[path]["seconds"].append(seconds)
                results[path]["self_cpu_s"].append(self_cpu_s() - cpu)
                results[path]["triton_cpu_s"].append(triton_s)
                texts.setdefault(path, read)
                log(f"round {round_ + 1} {path}: {args.frames / seconds:.2f} frames/s")
    finally:
        await recognizer.close()
        await server.astop()
    for path in PATHS:
        row = results[path]
        row["frames_per_s"] = args.frames / statistics.median(row["seconds"])
        row["self_cpu_ms_per_frame"] = 1000 * statistics.median(row["self_cpu_s"]) / args.frames
        row["triton_cpu_ms_per_frame"] = 1000 * statistics.median(row["triton_cpu_s"]) / args.frames
    same = sum(a == b for a, b in zip(texts["bgr"], texts["yuv"], strict=True))
    return {
        "paths": results,
        "speedup": results["yuv"]["frames_per_s"] / results["bgr"]["frames_per_s"],
        "frames_with_the_same_texts": same,
        "frames": args.frames,
        "cameras": args.cameras,
        "differences": [
            {"frame": i, "bgr": a, "yuv": b}
            for i, (a, b) in enumerate(zip(texts["bgr"], texts["yuv"], strict=True))
            if a != b
        ],
    }


def report(result: dict[str, Any]) -> str:
    lines = [
        "| path | request bytes per frame | streamer writes per frame | frames/s | "
        "this process CPU ms/frame (decode incl.) | Triton CPU ms/frame |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for path, row in result["paths"].items():
        writes = len(row["streamer_writes"])
        lines.append(
            f"| {path} | {row['request_bytes'] / 1e6:.2f} MB | {writes} x "
            f"{row['request_bytes'] / 1e6:.1f} MB ({', '.join(row['streamer_writes'])}) | "
            f"{row['frames_per_s']:.2f} | {row['self_cpu_ms_per_frame']:.1f} | "
            f"{row['triton_cpu_ms_per_frame']:.0f} |"
        )
    lines.append(
        f"\nyuv / bgr frames/s: {result['speedup']:.2f}x; the same texts in "
        f"{result['frames_with_the_same_texts']} of {result['frames']} frames"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--step", type=int, default=2)
    parser.add_argument("--cameras", type=int, default=4)
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "transport.json")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.frames < 1 or args.step < 1 or args.cameras < 1:
        parser.error("--rounds, --frames, --step and --cameras must be at least 1")
    result = asyncio.run(measure(args))
    write_result(result, args.json, argv)
    print(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def figure(result: dict[str, Any], command: str) -> Figure:
    """The suite's T row from a :func:`measure` result: YUV frames/s over BGR frames/s per
    round; bytes, writes, CPU and texts in its notes. It passes only with the same texts."""
    bgr, yuv = result["paths"]["bgr"], result["paths"]["yuv"]
    frames = result["frames"]
    same = result["frames_with_the_same_texts"]
    checks = [] if same == frames else [f"texts differ on {frames - same} of {frames} frames"]
    return Figure(
        key="T",
        title="transport: decoded frames as their YUV 4:2:0 planes vs as BGR (frames/s)",
        numerator="whole-chain frames/s, frames sent as image_i420 (the service's default)",
        denominator="whole-chain frames/s, the same frames sent as image (BGR)",
        unit="frames/s",
        a=[frames / s for s in yuv["seconds"]],
        b=[frames / s for s in bgr["seconds"]],
        target=1.0,
        higher_is_better=True,
        notes=[
            f"`{command}`: the same {frames} decoded frames of yard_cam.ts through the "
            "product's client (PlateRecognizer), decode included, spread over "
            f"{result['cameras']} cameras, the two paths alternating in each round; BGR is "
            "what a model repository without image_i420 gets",
            f"request per frame: BGR {bgr['request_bytes'] / 1e6:.2f} MB, YUV "
            f"{yuv['request_bytes'] / 1e6:.2f} MB; the streamer writes each frame 3 times on "
            f"either path ({', '.join(bgr['streamer_writes'])} / "
            f"{', '.join(yuv['streamer_writes'])})",
            f"CPU ms per frame, this process (decode included): BGR "
            f"{bgr['self_cpu_ms_per_frame']:.1f}, YUV {yuv['self_cpu_ms_per_frame']:.1f}; "
            f"Triton's tree: BGR {bgr['triton_cpu_ms_per_frame']:.0f}, YUV "
            f"{yuv['triton_cpu_ms_per_frame']:.0f}",
            f"the same texts in {same} of {frames} frames (event texts: docs/ACCURACY.md)",
        ],
        extra={"transport": {k: v for k, v in result.items() if k != "meta"}},
        failed_checks=checks,
    )
