"""The bare in-process loop of P1: one process decodes a file with PyAV and runs the three models.

    MODELS_PYTHON bench/bare_loop.py --clip FILE [--sample-fps 15] [--threads 2]
        [--extra-site DIR] [--warmup 3]

No Triton, no asyncio, no queues: decode -> sample (the service's slot rule) -> BGR ->
letterbox -> detector -> decode head + NMS -> crops -> stn -> lprnet -> CTC, frame after frame,
with ``plate_ops`` (the BLS's own pre/post-processing) and the models of the repository as
it was built: TorchScript files with ``torch.set_num_threads(threads)``, or OpenVINO IR
(``--runtime openvino``) compiled for the CPU with ``INFERENCE_NUM_THREADS = threads`` and the
precision hint each model's config gives.

Run by ``python -m bench`` in the Python environment the embedded Triton's models run in
(``.venv-triton``: the same torch, numpy and OpenCV builds as inside Triton); ``--extra-site``
appends the service venv's site-packages for PyAV only. Prints one JSON object on stdout. The
timed part starts when the file is opened (after model load and ``--warmup`` untimed frames)
and ends after the last frame's plates are decoded.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROJECT_ROOT = HERE.parent


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


NAMES = ("detector", "stn", "lprnet")


def _torchscript(args: argparse.Namespace) -> Any:
    import numpy as np
    import torch

    models = {
        name: torch.jit.load(str(args.repository / name / "1" / "model.pt"), map_location="cpu")
        for name in NAMES
    }
    for module in models.values():
        module.eval()

    def forward(name: str, batch: Any) -> Any:
        with torch.inference_mode():
            out = models[name](torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32)))
        if isinstance(out, (tuple, list)):
            out = out[0]
        return out.contiguous().numpy()

    return forward


def _openvino(args: argparse.Namespace) -> Any:
    """The IR of each model, compiled as its Triton model compiles it (one stream)."""
    import re

    import numpy as np
    import openvino as ov

    core = ov.Core()
    requests = {}
    for name in NAMES:
        config = (args.repository / name / "config.pbtxt").read_text()
        hint = re.search(r'"INFERENCE_PRECISION_HINT", value: \{ string_value: "(\w+)"', config)
        compiled = core.compile_model(
            core.read_model(str(args.repository / name / "1" / "model.xml")),
            "CPU",
            {
                "INFERENCE_NUM_THREADS": args.threads,
                "INFERENCE_PRECISION_HINT": hint.group(1) if hint else "f32",
                "NUM_STREAMS": 1,
                "ENABLE_CPU_PINNING": False,
            },
        )
        requests[name] = compiled.create_infer_request()

    def forward(name: str, batch: Any) -> Any:
        return requests[name].infer({0: np.ascontiguousarray(batch, dtype=np.float32)})[0]

    return forward


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clip", type=Path, required=True)
    parser.add_argument("--repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--sample-fps", type=float, default=15.0)
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--warmup", type=int, default=3, help="untimed frames first")
    parser.add_argument("--extra-site", action="append", default=[], help="appended to sys.path")
    args = parser.parse_args(argv)

    sys.path.extend(args.extra_site)
    sys.path.insert(0, str(PROJECT_ROOT))
    sys.path.insert(0, str(args.repository / "plate_recognition" / "1"))
    warnings.filterwarnings("ignore", message="`torch.jit", category=FutureWarning)

    import av
    import numpy as np
    import plate_ops
    import torch

    from bench.params import load_params

    params = load_params(args.repository)
    torch.set_num_threads(args.threads)
    runtime = (
        "openvino"
        if (args.repository / "detector" / "1" / "model.xml").is_file()
        else ("torchscript")
    )
    forward = _openvino(args) if runtime == "openvino" else _torchscript(args)

    infer_s = 0.0

    def chain(image: Any) -> list[str]:
        nonlocal infer_s
        started = time.perf_counter()
        tensor, transform = plate_ops.letterbox(image, params.input_hw)
        head = forward("detector", tensor[None])[0]
        dets = plate_ops.decode_head(head, params.conf_threshold, params.head_layout)
        dets = plate_ops.non_max_suppression(dets, params.iou_threshold, params.max_plates)
        dets.boxes = plate_ops.unletterbox_boxes(
            dets.boxes, transform, (image.shape[0], image.shape[1])
        )
        texts: list[str] = []
        if len(dets):
            crops = plate_ops.crop_plates(image, dets.boxes, params.crop_pad_ratio)
            step = params.recogniser_max_batch
            logits = np.concatenate(
                [
                    forward("lprnet", forward("stn", crops[i : i + step]))
                    for i in range(0, len(crops), step)
                ]
            )
            texts = plate_ops.ctc_greedy_decode(logits)[0]
        infer_s += time.perf_counter() - started
        return texts

    # Warm-up, untimed: TorchScript's profiling executor optimises for the first shapes it
    # sees, so the recognisers see every crop count up to max_plates (as the bench warms up
    # Triton's callees) and the chain runs on the first frames.
    for _ in range(3):
        for n in range(1, params.max_plates + 1):
            forward("lprnet", forward("stn", np.zeros((n, 3, 24, 94), np.float32)))
    with av.open(str(args.clip)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i >= args.warmup:
                break
            chain(frame.to_ndarray(format="bgr24"))
    infer_s = 0.0

    period = 1.0 / args.sample_fps
    tolerance = min(1e-3, period / 10)
    decoded = sampled = plates = 0
    texts: list[str] = []
    cpu0, started = cpu_s(), time.perf_counter()
    with av.open(str(args.clip)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"  # as the service's ingest does for files
        next_slot: float | None = None
        for frame in container.decode(stream):
            decoded += 1
            t = float(frame.pts * frame.time_base) if frame.pts is not None else decoded * period
            if next_slot is not None and t < next_slot - tolerance:
                continue
            slot = t if next_slot is None else next_slot
            next_slot = slot + period if slot + period > t else t + period
            sampled += 1
            found = chain(frame.to_ndarray(format="bgr24"))
            plates += len(found)
            texts.extend(found)
    wall = time.perf_counter() - started
    cpu = cpu_s() - cpu0
    json.dump(
        {
            "frames": sampled,
            "decoded": decoded,
            "wall_s": wall,
            "frames_per_s": sampled / wall if wall > 0 else 0.0,
            "cpu_s": cpu,
            "infer_s": infer_s,
            "plates": plates,
            "distinct_texts": len(set(texts)),
            "runtime": runtime,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "torch_threads": torch.get_num_threads(),
            "python": sys.executable,
        },
        sys.stdout,
    )
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
