"""How the crop padding ratio changes what the recogniser reads, on the shared footage.

    .venv/bin/python -m bench.crop_padding [--pads 0,0.05,0.1,0.2,0.3]
        [--variants original,crf30,crf38,720p,hevc] [--every 3] [--out FILE] [--clips DIR]

``plate_ops.crop_plates(frame, boxes, pad_ratio)`` pads each detector box by ``pad_ratio`` of
its height above and below before the crop goes to STN + LPRNet. For every ``--every``-th
frame of each variant of the yard clip (bench/accuracy.py's recipes, built into ``--clips``
when missing) the detector runs once; each pad ratio then crops the same boxes and reads
them. A read is exact when its text is the plate of its car: a box whose left edge is past
0.4 of the frame width is the black car (O567AM76), any other the silver car (Y836XH76).
The van photo (car.jpg at 1920x1080, plate B840CK197) is read at each pad too, on the
detection nearest the seed box. The models are model_repository/'s OpenVINO IR (`make
models`), run on the CPU without Triton, with the BLS model's thresholds. Prints a Markdown
table (rows: pad ratios, ``plate_ops.CROP_PAD_RATIO`` marked as the default) and writes the
same figures, with every text read, as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import openvino as ov

from bench.accuracy import VARIANTS, build
from bench.common import PROJECT_ROOT, RESULTS_DIR, git_commit, log, source_clip
from converters import assets
from converters.paths import MODEL_REPOSITORY, import_plate_ops

plate_ops = import_plate_ops()

BLACK, SILVER, VAN = "O567AM76", "Y836XH76", "B840CK197"
BLACK_X1_FRACTION = 0.4  # the black car's box starts right of this fraction of the width
VAN_SEED_BOX = np.array([232.4, 814.2, 324.6, 841.9], np.float32)  # the van plate, 1920x1080
CONF_THRESHOLD, IOU_THRESHOLD, MAX_PLATES = 0.25, 0.45, 16  # plate_recognition's defaults
DEFAULT_PADS = "0,0.05,0.1,0.2,0.3"
DEFAULT_VARIANTS = "original,crf30,crf38,720p,hevc"


class Pipeline:
    """Detector, STN and LPRNet of ``model_repository/``, compiled for the CPU."""

    def __init__(self, repository: Path = MODEL_REPOSITORY) -> None:
        info = json.loads((repository / "build_info.json").read_text())
        if info.get("runtime") != "openvino":
            raise SystemExit(f"{repository} is not an OpenVINO build: run `make models`")
        self.input_hw = (int(info["input_hw"][0]), int(info["input_hw"][1]))
        self.layout = info.get("detector_layout", "auto")
        core = ov.Core()
        self.detector, self.stn, self.lprnet = (
            core.compile_model(str(repository / name / "1" / "model.xml"), "CPU")
            for name in ("detector", "stn", "lprnet")
        )

    def boxes(self, frame: np.ndarray) -> np.ndarray:
        """Plate boxes of one BGR frame in frame pixels, after NMS."""
        tensor, transform = plate_ops.letterbox(frame, self.input_hw)
        head = self.detector(tensor[None])[0][0]
        dets = plate_ops.decode_head(head, CONF_THRESHOLD, self.layout)
        dets = plate_ops.non_max_suppression(dets, IOU_THRESHOLD, MAX_PLATES)
        return plate_ops.unletterbox_boxes(dets.boxes, transform, frame.shape[:2])

    def read(self, frame: np.ndarray, boxes: np.ndarray, pad: float) -> list[str]:
        if len(boxes) == 0:
            return []
        crops = plate_ops.crop_plates(frame, boxes, pad)
        logits = self.lprnet(self.stn(crops)[0])[0]
        return plate_ops.ctc_greedy_decode(np.asarray(logits))[0]


def frames(path: Path, every: int) -> Iterator[np.ndarray]:
    """Every ``every``-th decoded frame of ``path`` (PyAV, as the service decodes), BGR."""
    with av.open(str(path)) as container:
        for index, frame in enumerate(container.decode(video=0)):
            if index % every == 0:
                yield frame.to_ndarray(format="bgr24")


def score_clip(pipeline: Pipeline, path: Path, pads: list[float], every: int) -> dict[str, Any]:
    """Per pad: for each car, exact reads, boxes seen and every text read (with counts)."""
    reads = {pad: {car: Counter[str]() for car in ("black", "silver")} for pad in pads}
    sampled = 0
    for frame in frames(path, every):
        sampled += 1
        boxes = pipeline.boxes(frame)
        cars = [
            "black" if x1 > BLACK_X1_FRACTION * frame.shape[1] else "silver" for x1 in boxes[:, 0]
        ]
        for pad in pads:
            for car, text in zip(cars, pipeline.read(frame, boxes, pad), strict=True):
                reads[pad][car][text] += 1
    truth = {"black": BLACK, "silver": SILVER}
    return {
        "frames": sampled,
        "pads": {
            str(pad): {
                car: {
                    "exact": texts[truth[car]],
                    "total": sum(texts.values()),
                    "reads": dict(texts.most_common()),
                }
                for car, texts in by_car.items()
            }
            for pad, by_car in reads.items()
        },
    }


def score_van(pipeline: Pipeline, pads: list[float]) -> dict[str, Any]:
    """The van photo: the text of the detection nearest the seed box, per pad."""
    image = cv2.imread(str(assets.verify(assets.asset("car.jpg"), assets.default_assets_dir())))
    frame = cv2.resize(image, (1920, 1080), interpolation=cv2.INTER_AREA)
    boxes = pipeline.boxes(frame)
    if len(boxes) == 0:
        return {"box": None, "pads": {str(pad): "" for pad in pads}}
    centres = (boxes[:, :2] + boxes[:, 2:]) / 2
    seed = (VAN_SEED_BOX[:2] + VAN_SEED_BOX[2:]) / 2
    nearest = boxes[[int(np.linalg.norm(centres - seed, axis=1).argmin())]]
    return {
        "box": [round(float(v), 1) for v in nearest[0]],
        "pads": {str(pad): pipeline.read(frame, nearest, pad)[0] for pad in pads},
    }


def markdown(result: dict[str, Any]) -> str:
    names = list(result["variants"])
    head = ["pad", *(f"{n} {car}" for n in names for car in ("black", "silver")), "van text"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for pad in result["pads"]:
        cells = [f"{pad} (default)" if pad == result["default_pad"] else str(pad)]
        for name in names:
            for car in ("black", "silver"):
                figure = result["variants"][name]["pads"][str(pad)][car]
                cells.append(f"{figure['exact']}/{figure['total']}")
        cells.append(result["van"]["pads"][str(pad)])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> dict[str, Any]:
    pads = [float(p) for p in args.pads.split(",")]
    by_name = {v.name: v for v in VARIANTS}
    wanted = args.variants.split(",")
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; bench.accuracy has {sorted(by_name)}")
    started = time.monotonic()
    pipeline = Pipeline()
    clips_dir = Path(args.clips)
    clips_dir.mkdir(parents=True, exist_ok=True)
    source = source_clip()
    result: dict[str, Any] = {
        "pads": pads,
        "default_pad": plate_ops.CROP_PAD_RATIO,
        "every": args.every,
        "truth": {"black": BLACK, "silver": SILVER, "van": VAN},
        "variants": {},
    }
    for name in wanted:
        log(f"crop_padding: {name}")
        clip = build(by_name[name], source, clips_dir)
        result["variants"][name] = score_clip(pipeline, clip, pads, args.every)
    log("crop_padding: van photo")
    result["van"] = score_van(pipeline, pads)
    result["meta"] = {
        "command": " ".join(["python -m bench.crop_padding", *args.argv]),
        "git_commit": git_commit(),
        "seconds": round(time.monotonic() - started, 1),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    log(f"crop_padding: wrote {out} in {result['meta']['seconds']} s")
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.crop_padding", description=__doc__)
    parser.add_argument("--pads", default=DEFAULT_PADS, help="comma-separated pad ratios")
    parser.add_argument("--variants", default=DEFAULT_VARIANTS, help="bench.accuracy names")
    parser.add_argument("--every", type=int, default=3, help="use every Nth frame")
    parser.add_argument("--out", default=str(RESULTS_DIR / "crop_padding.json"))
    parser.add_argument(
        "--clips",
        default=str(PROJECT_ROOT / "bench" / "results" / "accuracy"),
        help="where the variant clips are (built there when missing)",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv
    result = run(args)
    print(markdown(result), end="")
    return result


if __name__ == "__main__":
    main()
