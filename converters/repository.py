"""Build a complete Triton model repository for a target (cpu or gpu).

Everything is checked and written into a scratch folder first; only when every
model has been exported, compared and its config parsed does the build move
into the output folder. A failed build leaves the output as it was.

The tensor models (detector, stn, lprnet) are served as TorchScript by default (a
Python-backend model on cpu, ``pytorch_libtorch`` on gpu); ``runtime`` "openvino" (cpu)
converts them to OpenVINO IR via ONNX, "onnx" (gpu) serves the ONNX files on
``onnxruntime_onnx``, optionally with the TensorRT accelerator (see ``onnx_export``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from converters import assets, detector, onnx_export, quantize, recognisers
from converters.errors import ConversionError
from converters.model_config import (
    AUTO_PRECISION,
    DEFAULT_INPUT_HW,
    DEFAULT_REGION_SIZE,
    Serving,
    TensorModel,
    cpu_precision_hint,
    parse_config,
    render_plate_recognition,
    render_tensor_model,
)
from converters.paths import (
    BLS_CODE_DIR,
    BLS_MODEL,
    MODEL_REPOSITORY,
    TEMPLATES,
    import_plate_ops,
    import_regions,
)
from streamer.foundation.build_info import BUILD_INFO_FILE

#: Largest |eager - TorchScript| accepted for the recognisers.
MAX_EXPORT_DIFFERENCE = 1e-5
#: What was built, read back by the service (--version, lpr_build_info).
BUILD_INFO = BUILD_INFO_FILE
TARGETS = ("cpu", "gpu")
RECOGNISER_MAX_BATCH = 64


#: plate_recognition's instances by target. On the CPU one: the detector needs every core,
#: and one instance already serves many frames at once; on a GPU two, so the BLS's own CPU
#: work (13 ms of CPU a 1080p frame, docs/PERFORMANCE.md P2) runs on two cores as a GPU
#: detector outruns one.
DEFAULT_BLS_INSTANCES = {"cpu": 1, "gpu": 2}


@dataclass
class BuildOptions:
    target: str = "cpu"
    assets_dir: Path | None = None  # default: assets.default_assets_dir()
    out: Path = MODEL_REPOSITORY
    input_hw: tuple[int, int] = DEFAULT_INPUT_HW
    # The region detector's square input; 0: none (model_config.DEFAULT_REGION_SIZE).
    region_size: int = DEFAULT_REGION_SIZE
    detector_checkpoint: Path | None = None  # default: the asset YOLOv8n checkpoint
    conf_threshold: float = 0.25
    iou_threshold: float = 0.45
    max_plates: int = 16
    gpu_instances: int = 1
    # CPU target: the detector as N instances of T torch threads each. Two single-thread
    # instances beat one two-thread instance on 2 cores (docs/PERFORMANCE.md, P1): two frames
    # in flight run side by side with no OpenMP barriers, whose spinning threads otherwise
    # burn the CPU that the BLS, Triton and the service's decode need.
    cpu_detector_instances: int = 2
    cpu_detector_threads: int = 1
    # plate_recognition's instances (processes); None: the target's DEFAULT_BLS_INSTANCES.
    bls_instances: int | None = None
    # How the tensor models are served: see model_config.Serving.resolve for the choices.
    runtime: str | None = None  # None: the target's default (model_config.DEFAULT_RUNTIMES)
    # None: the runtime's default (fp32; fp16 with TensorRT); "auto": model_config.AUTO_PRECISION
    precision: str | None = None
    tensorrt: bool = False
    extra_info: dict[str, object] = field(default_factory=dict)


def _weights(options: BuildOptions, progress: Callable[[str], None]) -> dict[str, Path]:
    """The three checkpoints, the known ones verified against their sha256."""
    root = options.assets_dir or assets.default_assets_dir()
    paths: dict[str, Path] = {}
    for name, asset_name in (
        ("lprnet", "weights/lprnet.pth"),
        ("stn", "weights/stn.pth"),
        ("detector", "weights/plate_detector_yolov8n.pt"),
    ):
        if name == "detector" and options.detector_checkpoint is not None:
            paths[name] = options.detector_checkpoint  # the user's own: no known hash
            continue
        asset = assets.asset(asset_name)
        try:
            paths[name] = assets.verify(asset, root)
        except assets.AssetError as exc:
            raise ConversionError(str(exc)) from exc
        progress(f"{name}: {paths[name]} (sha256 ok)")
    return paths


#: The second detector's model name (model_repository/plate_recognition/1/regions.py).
REGION_DETECTOR = "detector_region"


def _detector_model(
    name: str, exported: detector.ExportedDetector, options: BuildOptions
) -> TensorModel:
    h, w = exported.input_hw
    return TensorModel(
        name=name,
        input_dims=(3, h, w),
        output_dims=exported.output_shape,
        cpu_max_batch_size=4,
        cpu_torch_threads=options.cpu_detector_threads,
        cpu_instances=options.cpu_detector_instances,
        gpu_max_batch_size=16,
        gpu_preferred_batch_sizes=(4, 8, 16),
        # bf16 on the detector: about 2x its speed, boxes move by a few pixels (2 of 60
        # yard_cam frames read otherwise). On the STN it changed the texts of 10 of the
        # 60 frames for little gain (bench.runtimes), so the recognisers stay f32.
        cpu_bf16=True,
        cpu_int8=True,  # (converters/quantize.py says why the recognisers do not)
    )


def _tensor_models(
    detectors: dict[str, detector.ExportedDetector], options: BuildOptions
) -> dict[str, TensorModel]:
    return {
        **{name: _detector_model(name, exported, options) for name, exported in detectors.items()},
        "stn": TensorModel(
            name="stn",
            input_dims=recognisers.SPECS["stn"].input_chw,
            output_dims=recognisers.SPECS["stn"].output_shape,
            cpu_max_batch_size=RECOGNISER_MAX_BATCH,
            cpu_torch_threads=1,
            gpu_max_batch_size=RECOGNISER_MAX_BATCH,
            gpu_preferred_batch_sizes=(16, 32, 64),
        ),
        "lprnet": TensorModel(
            name="lprnet",
            input_dims=recognisers.SPECS["lprnet"].input_chw,
            output_dims=recognisers.SPECS["lprnet"].output_shape,
            cpu_max_batch_size=RECOGNISER_MAX_BATCH,
            cpu_torch_threads=1,
            gpu_max_batch_size=RECOGNISER_MAX_BATCH,
            gpu_preferred_batch_sizes=(16, 32, 64),
        ),
    }


@dataclass(frozen=True)
class _Network:
    """One tensor model's sources: the TorchScript to save, the network to export to ONNX."""

    scripted: torch.jit.ScriptModule
    eager: torch.nn.Module
    input_chw: tuple[int, ...]
    image_input: bool  # random test inputs in 0..1 (an image) rather than N(0, 1)
    check_batch: int


def _write_model(
    staging: Path,
    model: TensorModel,
    network: _Network,
    options: BuildOptions,
    serving: Serving,
    progress: Callable[[str], None],
) -> None:
    version = staging / model.name / "1"
    version.mkdir(parents=True)
    if serving.runtime == "torchscript":
        torch.jit.save(network.scripted, str(version / "model.pt"))
    else:
        bf16 = options.target == "cpu" and cpu_precision_hint(model, serving) == "bf16"
        _write_onnx_model(staging, version, model.name, network, serving, bf16, progress)
        if serving.precision == "int8" and model.cpu_int8:
            input_hw = (model.input_dims[1], model.input_dims[2])
            inputs = quantize.calibration_inputs(input_hw, options.assets_dir)
            quantize.quantize_detector(version / onnx_export.IR_FILE, inputs, progress)
    config_text = render_tensor_model(model, options.target, options.gpu_instances, serving)
    parse_config(config_text, f"{model.name}/config.pbtxt")
    (staging / model.name / "config.pbtxt").write_text(config_text)
    if options.target == "cpu":
        template = (
            "torchscript_model.py" if serving.runtime == "torchscript" else "openvino_model.py"
        )
        shutil.copyfile(TEMPLATES / template, version / "model.py")


def _write_onnx_model(
    staging: Path,
    version: Path,
    name: str,
    network: _Network,
    serving: Serving,
    bf16: bool,
    progress: Callable[[str], None],
) -> None:
    """ONNX (gpu: served as is) or OpenVINO IR (cpu), each checked against PyTorch.

    ``bf16``: the model will run with OpenVINO's bf16 hint; its deviation is reported.
    """
    example = torch.zeros((1, *network.input_chw))
    if serving.runtime == "onnx":
        onnx_path = version / onnx_export.ONNX_FILE
        checked = onnx_path
    else:
        (staging / ".onnx").mkdir(exist_ok=True)
        onnx_path = staging / ".onnx" / f"{name}.onnx"
        checked = version / onnx_export.IR_FILE
    onnx_export.export_onnx(name, network.eager, example, onnx_path)
    if serving.runtime == "openvino":
        onnx_export.save_openvino(name, onnx_path, checked)
    what = "ONNX" if serving.runtime == "onnx" else "OpenVINO IR"
    comparison = onnx_export.compare(
        name,
        network.eager,
        checked,
        network.input_chw,
        network.check_batch,
        uniform=network.image_input,
    )
    onnx_export.check(name, comparison, f"the {what} (run by OpenVINO, fp32)")
    progress(
        f"{name}: exported to {what}, max |PyTorch - {what}| = {comparison.max_abs:.1e} "
        f"on a random batch of {comparison.batch}"
    )
    if bf16:
        if not onnx_export.cpu_supports_bf16():
            progress(f"{name}: this CPU does not support bf16; the model will not load here")
            return
        reduced = onnx_export.compare(
            name,
            network.eager,
            checked,
            network.input_chw,
            network.check_batch,
            precision="bf16",
            uniform=network.image_input,
        )
        progress(f"{name}: bf16 differs from PyTorch by up to {reduced.max_abs:.1e} (not checked)")


def _regions_pay(options: BuildOptions, progress: Callable[[str], None]) -> bool:
    """Whether a region detector is asked for and can ever be cheaper than a whole frame (the
    BLS uses regions only up to ``MAX_REGION_COST`` of a whole-frame pass)."""
    if not options.region_size:
        return False
    height, width = options.input_hw
    cost = options.region_size**2 / (height * width)
    if cost > import_regions().MAX_REGION_COST:
        progress(
            f"{REGION_DETECTOR}: none; a {options.region_size}x{options.region_size} region "
            f"costs {cost:.2f} of a {height}x{width} whole-frame pass"
        )
        return False
    return True


def _region_detector(
    checkpoint: Path, region_hw: tuple[int, int], progress: Callable[[str], None]
) -> detector.ExportedDetector:
    """The same detector exported at the regions' input size. A TorchScript file is fixed to
    the size it was exported at: the user is told to export it at this size too, or to build
    with ``--region-size 0``."""
    if detector.is_torchscript_archive(checkpoint):
        raise ConversionError(
            f"detector: {checkpoint.name} is TorchScript, fixed at one input size; build with "
            "--region-size 0 (whole frames only), or bring an Ultralytics checkpoint"
        )
    progress(f"{REGION_DETECTOR}: the detector at {region_hw[0]}x{region_hw[1]} for regions")
    return detector.export_detector(checkpoint, region_hw, progress)


def resolve_serving(options: BuildOptions) -> Serving:
    """How the tensor models are served; ``auto`` precision resolved on this machine."""
    if options.precision != AUTO_PRECISION:
        return Serving.resolve(options.target, options.runtime, options.precision, options.tensorrt)
    serving = Serving.resolve(options.target, options.runtime, None, options.tensorrt)
    openvino = options.target == "cpu" and serving.runtime == "openvino"
    if openvino and onnx_export.cpu_supports_bf16():
        return Serving.resolve(options.target, serving.runtime, "bf16", options.tensorrt)
    return serving


def build(options: BuildOptions, progress: Callable[[str], None] = print) -> Path:
    """Export all models for ``options.target`` into ``options.out``; return it."""
    if options.target not in TARGETS:
        raise ConversionError(f"unknown target {options.target!r}: use one of {TARGETS}")
    serving = resolve_serving(options)
    started = time.monotonic()
    weights = _weights(options, progress)

    networks: dict[str, _Network] = {}
    for name in ("stn", "lprnet"):
        spec = recognisers.SPECS[name]
        eager = recognisers.load_checkpoint(spec, weights[name])
        scripted = recognisers.export_torchscript(spec, eager)
        difference = recognisers.max_abs_difference(spec, eager, scripted)
        if difference > MAX_EXPORT_DIFFERENCE:
            raise ConversionError(
                f"{name}: TorchScript differs from eager by {difference:.2e} "
                f"(> {MAX_EXPORT_DIFFERENCE:.0e})"
            )
        progress(f"{name}: exported to TorchScript, max |eager - scripted| = {difference:.1e}")
        networks[name] = _Network(scripted, eager, spec.input_chw, False, 4)

    full = detector.export_detector(weights["detector"], options.input_hw, progress)
    detectors = {"detector": full}
    if _regions_pay(options, progress):
        region_hw = (options.region_size, options.region_size)
        detectors[REGION_DETECTOR] = _region_detector(weights["detector"], region_hw, progress)
    for name, each in detectors.items():
        networks[name] = _Network(each.module, each.module, (3, *each.input_hw), True, 2)
    models = _tensor_models(detectors, options)

    out = options.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.building-", dir=out.parent) as tmp:
        staging = Path(tmp)
        for name, model in models.items():
            progress(f"{name}: writing {options.target} model ({serving.runtime})")
            _write_model(staging, model, networks[name], options, serving, progress)

        built_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        region = models.get(REGION_DETECTOR)
        # The build is also in the BLS config, so that a client of a remote Triton can read it
        # (get_model_config: lpr_build_info); build_info.json has the whole of it.
        bls_config = render_plate_recognition(
            build_target=options.target,
            build_runtime=serving.runtime,
            build_precision=serving.precision,
            built_at=built_at,
            input_height=options.input_hw[0],
            input_width=options.input_hw[1],
            head_layout=full.layout,
            region_detector_model=REGION_DETECTOR if region else "",
            region_size=options.region_size if region else 0,
            region_max_batch_size=_max_batch(region, options.target) if region else 0,
            recogniser_max_batch_size=RECOGNISER_MAX_BATCH,
            conf_threshold=options.conf_threshold,
            iou_threshold=options.iou_threshold,
            max_plates=options.max_plates,
            crop_pad_ratio=import_plate_ops().CROP_PAD_RATIO,
            bls_instances=options.bls_instances or DEFAULT_BLS_INSTANCES[options.target],
        )
        parse_config(bls_config, f"{BLS_MODEL}/config.pbtxt")
        (staging / BLS_MODEL / "1").mkdir(parents=True)
        (staging / BLS_MODEL / "config.pbtxt").write_text(bls_config)
        for source in sorted(BLS_CODE_DIR.glob("*.py")):
            shutil.copyfile(source, staging / BLS_MODEL / "1" / source.name)

        info = {
            "target": options.target,
            "input_hw": list(options.input_hw),
            "region_input_hw": list(detectors[REGION_DETECTOR].input_hw)
            if REGION_DETECTOR in detectors
            else None,
            "detector_layout": full.layout,
            "detector_output": list(full.output_shape),
            "built_at": built_at,
            "runtime": serving.runtime,
            "precision": serving.precision,
            **({"precision_asked": AUTO_PRECISION} if options.precision == AUTO_PRECISION else {}),
            **({"gpu_accelerator": "tensorrt"} if serving.tensorrt else {}),
            **(
                {"precision_hints": {n: cpu_precision_hint(m, serving) for n, m in models.items()}}
                if serving.runtime == "openvino"
                else {}
            ),
            **(
                {"int8": sorted(n for n, m in models.items() if m.cpu_int8)}
                if serving.precision == "int8"
                else {}
            ),
            **_runtime_versions(serving.runtime),
            "torch": torch.__version__,
            **options.extra_info,
        }
        (staging / BUILD_INFO).write_text(json.dumps(info, indent=2) + "\n")
        _install(staging, out, [*models, BLS_MODEL], stale=[REGION_DETECTOR])
    progress(f"built {options.target} repository in {out} ({time.monotonic() - started:.1f} s)")
    return out


def _max_batch(model: TensorModel, target: str) -> int:
    return model.cpu_max_batch_size if target == "cpu" else model.gpu_max_batch_size


def _runtime_versions(runtime: str) -> dict[str, str]:
    if runtime == "torchscript":
        return {}
    import onnx
    import openvino

    return {"onnx": onnx.__version__, "openvino": openvino.__version__.split("-")[0]}


def _install(staging: Path, out: Path, model_names: list[str], stale: list[str]) -> None:
    """Move the staged models into ``out``, replacing older builds of them; the ``stale``
    models this build did not make (a region detector built before) are removed.

    The hand-written BLS files in the source repository are left in place (the
    staged copies are identical); only its generated config is replaced there.
    """
    out.mkdir(parents=True, exist_ok=True)
    (out / BUILD_INFO).unlink(missing_ok=True)  # an interrupted install has no build info
    for name in model_names:
        target = out / name
        if name == BLS_MODEL and target.resolve() == BLS_CODE_DIR.parent.resolve():
            (staging / name / "config.pbtxt").replace(target / "config.pbtxt")
            continue
        if target.exists():
            trash = staging / f"{name}.old"
            target.replace(trash)
        (staging / name).replace(target)
    for name in stale:
        if name not in model_names and (out / name).exists():
            (out / name).replace(staging / f"{name}.old")
    (staging / BUILD_INFO).replace(out / BUILD_INFO)
