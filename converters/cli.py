"""``python -m converters``: fetch the assets, build a Triton repository, check one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from converters import assets
from converters.errors import ConversionError
from converters.model_config import (
    AUTO_PRECISION,
    DEFAULT_INPUT_HW,
    DEFAULT_REGION_SIZE,
    PRECISIONS,
    RUNTIMES,
    Serving,
)
from converters.paths import MODEL_REPOSITORY
from streamer.cli.arguments import positive_int


def _region_size(text: str) -> int:
    """``--region-size``: 0 (no region detector) or a multiple of 32 from 64."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value != 0 and (value < 64 or value % 32):
        raise argparse.ArgumentTypeError(f"must be 0 or a multiple of 32 from 64, got {value}")
    return value


def _progress(message: str) -> None:
    print(message, flush=True)


def _fetch(args: argparse.Namespace) -> int:
    root = args.assets_dir or assets.default_assets_dir()
    wanted = [a for a in assets.ASSETS if args.only == "all" or a.path.startswith(args.only)]
    try:
        paths = assets.fetch(wanted, root, progress=_progress)
    except assets.AssetError as exc:
        raise ConversionError(str(exc)) from exc
    for path in paths:
        _progress(f"ok {path}")
    return 0


def _build(args: argparse.Namespace) -> int:
    # Imported here: torch is needed to build, not to fetch or check.
    from converters import detector, repository

    # Checked before any work (and before torch exports anything).
    asked = None if args.precision == AUTO_PRECISION else args.precision
    Serving.resolve(args.target, args.runtime, asked, args.tensorrt)

    options = repository.BuildOptions(
        target=args.target,
        assets_dir=args.assets_dir,
        out=args.out,
        input_hw=detector.parse_input_size(args.input_size),
        region_size=args.region_size,
        detector_checkpoint=args.detector,
        conf_threshold=args.conf_threshold,
        iou_threshold=args.iou_threshold,
        gpu_instances=args.gpu_instances,
        cpu_detector_instances=args.cpu_detector_instances,
        cpu_detector_threads=args.cpu_detector_threads,
        bls_instances=args.bls_instances,
        runtime=args.runtime,
        precision=args.precision,
        tensorrt=args.tensorrt,
    )
    repository.build(options, _progress)
    return 0


def _check(args: argparse.Namespace) -> int:
    from converters.model_config import load_config

    configs = sorted(args.repository.glob("*/config.pbtxt"))
    if not configs:
        raise ConversionError(f"{args.repository}: no */config.pbtxt found")
    for path in configs:
        config = load_config(path)
        kinds = ",".join(f"{g.count}x{type(g).Kind.Name(g.kind)}" for g in config.instance_group)
        backend = config.platform or config.backend
        batching = "dynamic" if config.HasField("dynamic_batching") else "none"
        _progress(
            f"{config.name}: {backend}, max_batch_size={config.max_batch_size}, "
            f"batching={batching}, instances={kinds or 'default'}"
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m converters", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    fetch = sub.add_parser("fetch", help="download missing weights/media and check sha256")
    fetch.add_argument(
        "--assets-dir",
        type=Path,
        help="default: $LPR_ASSETS_DIR, ../shared/assets or the user cache",
    )
    fetch.add_argument("--only", choices=("all", "weights", "media"), default="all")
    fetch.set_defaults(func=_fetch)

    build = sub.add_parser("build", help="export the models and write a Triton repository")
    build.add_argument("--target", choices=("cpu", "gpu"), default="cpu")
    build.add_argument("--assets-dir", type=Path, help="folder holding weights/ (see fetch)")
    build.add_argument("--out", type=Path, default=MODEL_REPOSITORY, help="repository folder")
    default_size = "x".join(map(str, DEFAULT_INPUT_HW))
    build.add_argument(
        "--input-size",
        default=default_size,
        help=f"detector input, N or HxW in multiples of 32 (default {default_size})",
    )
    build.add_argument(
        "--region-size",
        type=_region_size,
        default=DEFAULT_REGION_SIZE,
        help="input of a second detector for the regions around motion and live plates, a "
        f"multiple of 32 (default {DEFAULT_REGION_SIZE}; 0: none, always the whole frame)",
    )
    build.add_argument("--detector", type=Path, help="own detector: Ultralytics .pt or TorchScript")
    build.add_argument("--conf-threshold", type=float, default=0.25)
    build.add_argument("--iou-threshold", type=float, default=0.45)
    build.add_argument(
        "--gpu-instances", type=positive_int, default=1, help="instances per GPU model"
    )
    build.add_argument(
        "--cpu-detector-instances",
        type=positive_int,
        default=2,
        help="CPU target: detector instances (default 2; one frame each at a time)",
    )
    build.add_argument(
        "--cpu-detector-threads",
        type=positive_int,
        default=1,
        help="CPU target: threads (torch or OpenVINO) per detector instance (default 1); "
        "instances x threads should not exceed the cores Triton may use",
    )
    build.add_argument(
        "--bls-instances",
        type=positive_int,
        help="instances (processes) of plate_recognition, each serving many frames at once "
        "(default: 1 on cpu, 2 on gpu)",
    )
    build.add_argument(
        "--runtime",
        choices=RUNTIMES,
        help="how the detector, stn and lprnet are served: openvino (cpu default: OpenVINO "
        "IR in the Python backend), torchscript (gpu default: libtorch; cpu: torch in the "
        "Python backend), onnx (gpu: onnxruntime_onnx)",
    )
    build.add_argument(
        "--precision",
        choices=[*PRECISIONS, AUTO_PRECISION],
        help="openvino: fp32 (default), bf16 (the detector in bf16, which needs a CPU "
        "with bf16), auto (bf16 where this CPU has it natively, else fp32: `make models`) or "
        "int8 (the detector quantised by NNCF on the shared footage); stn and lprnet stay "
        "fp32; onnx with --tensorrt: fp16 (default) or fp32; torchscript: fp32 only",
    )
    build.add_argument(
        "--tensorrt",
        action="store_true",
        help="gpu --runtime onnx: add ONNX Runtime's TensorRT accelerator to the configs",
    )
    build.set_defaults(func=_build)

    check = sub.add_parser("check", help="parse every config.pbtxt of a repository")
    check.add_argument("repository", type=Path, nargs="?", default=MODEL_REPOSITORY)
    check.set_defaults(func=_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ConversionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: the output folder was left as it was", file=sys.stderr)
        return 130
