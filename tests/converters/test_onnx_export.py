"""`converters build --runtime`: OpenVINO IR for the CPU, ONNX (+ TensorRT) for the GPU."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
import torch
from torch import Tensor, nn
from tritonclient.grpc import model_config_pb2

from converters import assets, onnx_export, recognisers
from converters.cli import main
from converters.errors import ConversionError
from converters.model_config import (
    Serving,
    TensorModel,
    load_config,
    parse_config,
    render_tensor_model,
)

TENSOR_MODELS = ("detector", "stn", "lprnet")
REJECT = model_config_pb2.ModelQueuePolicy.REJECT


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _eager(name: str) -> nn.Module:
    spec = recognisers.SPECS[name]
    asset = assets.asset(f"weights/{name}.pth")
    return recognisers.load_checkpoint(spec, assets.verify(asset, assets.default_assets_dir()))


def _assert_queue_policy(config: model_config_pb2.ModelConfig) -> None:
    policy = config.dynamic_batching.default_queue_policy
    assert policy.timeout_action == REJECT and policy.allow_timeout_override


@pytest.mark.parametrize("name", ["stn", "lprnet"])
def test_openvino_ir_equals_eager_at_any_batch_size(tmp_path: Path, name: str) -> None:
    eager = _eager(name)
    spec = recognisers.SPECS[name]
    onnx_path, xml_path = tmp_path / "model.onnx", tmp_path / "model.xml"
    onnx_export.export_onnx(name, eager, torch.zeros((1, *spec.input_chw)), onnx_path)
    onnx_export.save_openvino(name, onnx_path, xml_path)
    assert xml_path.with_suffix(".bin").stat().st_size > 100_000
    for batch in (1, 5):  # the batch axis is dynamic: 5 was never seen by the exporter
        for path in (onnx_path, xml_path):
            comparison = onnx_export.compare(name, eager, path, spec.input_chw, batch)
            assert comparison.ok, comparison
            assert comparison.max_abs < onnx_export.ATOL
    # The check has teeth: another function of the same shape fails it, another shape raises.
    if name == "stn":
        assert not onnx_export.compare(name, lambda x: x, xml_path, spec.input_chw, 2).ok
    else:
        with pytest.raises(ConversionError, match="output shape"):
            onnx_export.compare(name, _eager("stn"), xml_path, spec.input_chw, 2)


def test_cpu_openvino_build_writes_ir_and_python_backend_configs(tmp_path: Path) -> None:
    out = tmp_path / "repo"
    args = ["build", "--target", "cpu", "--runtime", "openvino", "--precision", "bf16"]
    args += ["--out", str(out), "--input-size", "320", "--cpu-detector-threads", "2"]
    assert main(args) == 0
    for name in TENSOR_MODELS:
        version = out / name / "1"
        assert sorted(p.name for p in version.iterdir()) == ["model.bin", "model.py", "model.xml"]
        config = load_config(out / name / "config.pbtxt")
        assert config.backend == "python" and not config.platform
        assert [t.name for t in config.input] == ["INPUT__0"]
        assert [t.name for t in config.output] == ["OUTPUT__0"]
        hint = config.parameters["INFERENCE_PRECISION_HINT"].string_value
        assert hint == ("bf16" if name == "detector" else "f32")  # the recognisers stay f32
        assert [g.kind for g in config.instance_group] == [
            model_config_pb2.ModelInstanceGroup.KIND_CPU
        ]
        _assert_queue_policy(config)
    detector = load_config(out / "detector" / "config.pbtxt")
    assert detector.parameters["INFERENCE_NUM_THREADS"].string_value == "2"
    assert [g.count for g in detector.instance_group] == [2]
    assert list(detector.input[0].dims) == [3, 320, 320]
    stn = load_config(out / "stn" / "config.pbtxt")
    assert stn.parameters["INFERENCE_NUM_THREADS"].string_value == "1"
    # A 480x480 region would cost more than a 320x320 whole frame: none is built.
    assert not (out / "detector_region").exists()
    info = json.loads((out / "build_info.json").read_text())
    assert info["runtime"] == "openvino" and info["precision"] == "bf16"
    assert info["precision_hints"] == {"detector": "bf16", "stn": "f32", "lprnet": "f32"}
    assert info["openvino"] and info["onnx"]


def test_precision_auto_takes_bf16_only_where_the_cpu_has_it(tmp_path: Path) -> None:
    out = tmp_path / "repo"
    args = ["build", "--target", "cpu", "--runtime", "openvino", "--precision", "auto"]
    assert main([*args, "--out", str(out), "--input-size", "320"]) == 0
    native = onnx_export.cpu_supports_bf16()
    info = json.loads((out / "build_info.json").read_text())
    assert info["precision"] == ("bf16" if native else "fp32")
    assert info["precision_asked"] == "auto"
    for name in TENSOR_MODELS:
        config = load_config(out / name / "config.pbtxt")
        hint = config.parameters["INFERENCE_PRECISION_HINT"].string_value
        assert hint == ("bf16" if native and name == "detector" else "f32"), name
    # On another runtime, auto is that runtime's default.
    args = ["build", "--target", "cpu", "--runtime", "torchscript", "--precision", "auto"]
    assert main([*args, "--out", str(tmp_path / "ts"), "--input-size", "320"]) == 0
    info = json.loads((tmp_path / "ts" / "build_info.json").read_text())
    assert info["precision"] == "fp32"


class _Perturbed(nn.Module):
    """The network with a small error on top: what a broken export would compute."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: Tensor) -> Tensor:
        return self.inner(x) * 1.001 + 0.01


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("mismatch", "stn: the OpenVINO IR (run by OpenVINO, fp32) differs from PyTorch"),
        ("unconvertible", "lprnet: OpenVINO cannot convert the ONNX export"),
    ],
)
def test_a_bad_export_fails_the_build_and_writes_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    breakage: str,
    message: str,
) -> None:
    out = tmp_path / "repo"
    assert main(["build", "--out", str(out), "--input-size", "320"]) == 0  # an earlier build
    before = _tree(out)
    capsys.readouterr()
    if breakage == "mismatch":
        original = onnx_export.onnx_ready

        def perturbed(module: nn.Module) -> nn.Module:
            if isinstance(module, torch.jit.ScriptModule):  # the detector: left as it is
                return module
            return _Perturbed(original(module))

        monkeypatch.setattr(onnx_export, "onnx_ready", perturbed)
    else:  # exported as written: ONNX's MaxPool cannot pool LPRNet's channels
        monkeypatch.setattr(onnx_export, "onnx_ready", lambda m: m)

    code = main(["build", "--runtime", "openvino", "--out", str(out), "--input-size", "320"])

    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("error: ") == 1 and "Traceback" not in err
    assert message in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert _tree(out) == before
    assert not list(tmp_path.glob(".*building*"))


def test_gpu_onnx_build_with_tensorrt_accelerator(tmp_path: Path) -> None:
    out = tmp_path / "gpu_onnx"
    args = ["build", "--target", "gpu", "--runtime", "onnx", "--tensorrt"]
    assert main([*args, "--out", str(out), "--input-size", "320"]) == 0
    for name in TENSOR_MODELS:
        config = load_config(out / name / "config.pbtxt")
        assert config.platform == "onnxruntime_onnx" and not config.backend
        assert [g.kind for g in config.instance_group] == [
            model_config_pb2.ModelInstanceGroup.KIND_GPU
        ]
        assert max(config.dynamic_batching.preferred_batch_size) <= config.max_batch_size
        _assert_queue_policy(config)
        (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
        assert accelerator.name == "tensorrt"
        assert accelerator.parameters["precision_mode"] == "FP16"
        dims = "x".join(str(d) for d in config.input[0].dims)
        assert accelerator.parameters["trt_profile_min_shapes"] == f"INPUT__0:1x{dims}"
        assert accelerator.parameters["trt_profile_max_shapes"] == (
            f"INPUT__0:{config.max_batch_size}x{dims}"
        )
        version = out / name / "1"
        assert sorted(p.name for p in version.iterdir()) == ["model.onnx"]
        graph = onnx.load(str(version / "model.onnx")).graph
        assert [i.name for i in graph.input] == ["INPUT__0"]
        assert [o.name for o in graph.output] == ["OUTPUT__0"]
        batch_dim = graph.input[0].type.tensor_type.shape.dim[0]
        assert batch_dim.dim_param and not batch_dim.dim_value  # dynamic batch
        in_dims = [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim[1:]]
        assert in_dims == list(config.input[0].dims)
    info = json.loads((out / "build_info.json").read_text())
    assert info["runtime"] == "onnx" and info["precision"] == "fp16"
    assert info["gpu_accelerator"] == "tensorrt"
    assert not (out / "plate_recognition" / "1" / "model.pt").exists()


def test_gpu_onnx_config_without_accelerator_and_in_fp32() -> None:
    model = TensorModel("stn", (3, 24, 94), (3, 24, 94), 64, 1, 64, (16, 32, 64))
    plain = parse_config(render_tensor_model(model, "gpu", 2, Serving("onnx", "fp32")))
    assert plain.platform == "onnxruntime_onnx" and not plain.HasField("optimization")
    assert [g.count for g in plain.instance_group] == [2]
    _assert_queue_policy(plain)
    fp32 = parse_config(render_tensor_model(model, "gpu", 1, Serving("onnx", "fp32", True)))
    (accelerator,) = fp32.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.parameters["precision_mode"] == "FP32"
    assert accelerator.parameters["trt_profile_opt_shapes"] == "INPUT__0:64x3x24x94"
    # The GPU default is unchanged: TorchScript on libtorch, no accelerator.
    default = parse_config(render_tensor_model(model, "gpu"))
    assert default.platform == "pytorch_libtorch" and not default.HasField("optimization")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--runtime", "onnx"], "runtime 'onnx' is not available for target cpu"),
        (["--target", "gpu", "--runtime", "openvino"], "not available for target gpu"),
        (["--runtime", "torchscript", "--precision", "bf16"], "not available for torchscript"),
        (["--runtime", "openvino", "--precision", "fp16"], "not available for openvino"),
        (["--tensorrt"], "the TensorRT accelerator needs --target gpu --runtime onnx"),
        (["--target", "gpu", "--runtime", "onnx", "--precision", "fp16"], "needs the TensorRT"),
    ],
)
def test_impossible_runtime_options_stop_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], message: str
) -> None:
    out = tmp_path / "repo"
    assert main(["build", "--out", str(out), *options]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert message in err, err
    assert not out.exists()
