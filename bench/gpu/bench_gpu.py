"""Frames per second of ``plate_recognition`` on one GPU, with 1, 4 and 8 concurrent streams.

Made for a rarely lent GPU machine (see bench/gpu/README.md): ``bench/gpu/run.sh`` unpacks
what ``run.sh prepare`` packed here and then runs this script, once, within a time budget.

1. A copy of the CPU-target model repository (``converters build --target cpu``: TorchScript
   files served by Python-backend models) is written with a GPU ``model.py`` (this file's
   ``GPU_MODEL_PY``: the same tensor contract, ``model.pt`` loaded on ``cuda:<device id>``),
   ``KIND_GPU`` instances and the GPU target's batching (max/preferred batch sizes, queue delay).
   ``plate_recognition`` (the BLS, CPU work: letterbox, NMS, crops) is copied unchanged.
2. Preflight: every ``model.pt`` on the GPU against the CPU (max abs difference) and its
   latency per batch size; the packages the Python-backend stub will import (numpy<2 first).
3. An :class:`streamer.inference.embedded.server.EmbeddedTriton` (the ``tritonserver`` of the
   ``nvidia-pytriton`` wheel) serves the copy. If ``KIND_GPU`` does not load (``--instance-kind
   auto``), it is retried with ``KIND_CPU`` instances whose ``model.py`` still runs on the GPU.
4. For each stream count N: N client processes, each one gRPC stream to ``plate_recognition``
   with ``--in-flight`` frames outstanding (a camera of the service: one stream, at most
   ``max_in_flight_per_camera`` frames at Triton), send the decoded 1920x1080 frames of
   yard_cam.ts as fast as the answers come back. After a warm-up, completed frames are counted
   for ``--duration`` seconds (latencies: frames sent and answered inside the window).
   nvidia-smi samples cover the window; Triton's per-model statistics (batch sizes, queue and
   compute times) cover the whole level, its warm-up included.

A table goes to stdout; everything to ``<out>/bench_gpu.json`` (rewritten after every step, so a
run cut short still leaves what it measured). Nothing is asserted: these are measurements.

``--device cpu`` runs the same flow on a machine without a GPU (the CPU Triton of
``make setup``), and ``--dry-run`` stops before the server starts: both for checking this
script where no GPU is.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import logging
import multiprocessing
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

MODEL = "plate_recognition"
OUTPUTS = ("boxes", "det_scores", "texts", "text_scores")
TENSOR_MODELS = ("detector", "stn", "lprnet")
# What `converters build --target gpu` writes (converters/repository.py, model_config.py):
# max_batch_size, preferred batch sizes; queue delay 2000 us.
GPU_BATCHING: dict[str, tuple[int, tuple[int, ...]]] = {
    "detector": (16, (4, 8, 16)),
    "stn": (64, (16, 32, 64)),
    "lprnet": (64, (16, 32, 64)),
}
GPU_QUEUE_DELAY_US = 2000
MICRO_BATCHES: dict[str, tuple[int, ...]] = {
    "detector": (1, 4, 8, 16),
    "stn": (1, 16, 64),
    "lprnet": (1, 16, 64),
}

LOG = logging.getLogger("bench_gpu")

# The Python-backend model of the bench's GPU repository: the contract of
# converters/templates/torchscript_model.py (INPUT__0 -> OUTPUT__0, requests merged by the
# dynamic batcher run as one batch), with the TorchScript module on a CUDA device.
GPU_MODEL_PY = '''\
"""Bench copy of converters/templates/torchscript_model.py: model.pt on a CUDA device.

Written by bench/gpu/bench_gpu.py; parameter "device": "cuda" (default) or "cpu".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        self.name = config["name"]
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        if params.get("device", "cuda") == "cuda":
            if not torch.cuda.is_available():
                raise pb_utils.TritonModelException(f"{self.name}: torch sees no CUDA device")
            index = 0
            if args.get("model_instance_kind") == "GPU":
                index = int(args.get("model_instance_device_id", "0"))
            self.device = torch.device("cuda", index)
            torch.cuda.set_device(self.device)
            torch.backends.cudnn.benchmark = params.get("cudnn_benchmark", "true") == "true"
        else:
            self.device = torch.device("cpu")
            torch.set_num_threads(int(params.get("torch_threads", "1")))
        path = Path(args["model_repository"]) / args["model_version"] / "model.pt"
        self.module = torch.jit.load(str(path), map_location=self.device).eval()
        pb_utils.Logger.log_info(
            f"{self.name}: {path.name} on {self.device} "
            f"(instance kind {args.get('model_instance_kind')}, torch {torch.__version__})"
        )

    def execute(self, requests: list[Any]) -> list[Any]:
        arrays = [pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy() for r in requests]
        sizes = [len(a) for a in arrays]
        batch = torch.from_numpy(np.concatenate(arrays, axis=0)).to(self.device)
        with torch.inference_mode():
            output = self.module(batch)
        if isinstance(output, (tuple, list)):
            output = output[0]
        result = output.float().contiguous().cpu().numpy()
        responses = []
        start = 0
        for size in sizes:
            tensor = pb_utils.Tensor("OUTPUT__0", result[start : start + size])
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
            start += size
        return responses
'''


# -- the repository ------------------------------------------------------------------------


def _dims(text: str, section: str) -> str:
    match = re.search(section + r"\s*\[.*?dims:\s*\[([^\]]*)\]", text, re.S)
    if match is None:
        raise ValueError(f"no {section} dims in config")
    return ", ".join(d.strip() for d in match.group(1).split(","))


def tensor_model_config(
    cpu_config: str, *, device: str, kind: str, instances: int, cpu_threads: int = 2
) -> str:
    """config.pbtxt of a bench tensor model, from its CPU-target config (name and dims)."""
    name_match = re.search(r'^name:\s*"([^"]+)"', cpu_config, re.M)
    if name_match is None:
        raise ValueError("no name in config")
    name = name_match.group(1)
    if device == "cuda":
        max_batch, preferred = GPU_BATCHING[name]
        batching = (
            f"  preferred_batch_size: [ {', '.join(map(str, preferred))} ]\n"
            f"  max_queue_delay_microseconds: {GPU_QUEUE_DELAY_US}\n"
        )
    else:
        cpu_max = re.search(r"^max_batch_size:\s*(\d+)", cpu_config, re.M)
        max_batch = int(cpu_max.group(1)) if cpu_max else 4
        batching = "  max_queue_delay_microseconds: 1000\n"
    return (
        f"# Written by bench/gpu/bench_gpu.py from the CPU-target config: model.pt on {device}.\n"
        f'name: "{name}"\n'
        'backend: "python"\n'
        f"max_batch_size: {max_batch}\n"
        "input [\n  {\n"
        '    name: "INPUT__0"\n    data_type: TYPE_FP32\n'
        f"    dims: [ {_dims(cpu_config, 'input')} ]\n"
        "  }\n]\n"
        "output [\n  {\n"
        '    name: "OUTPUT__0"\n    data_type: TYPE_FP32\n'
        f"    dims: [ {_dims(cpu_config, 'output')} ]\n"
        "  }\n]\n"
        f"dynamic_batching {{\n{batching}}}\n"
        f"instance_group [\n  {{\n    count: {instances}\n    kind: {kind}\n  }}\n]\n"
        "parameters [\n"
        f'  {{ key: "device", value: {{ string_value: "{device}" }} }},\n'
        '  { key: "cudnn_benchmark", value: { string_value: "true" } },\n'
        f'  {{ key: "torch_threads", value: {{ string_value: "{cpu_threads}" }} }}\n'
        "]\n"
    )


def make_repository(
    src: Path,
    dst: Path,
    *,
    devices: dict[str, str],
    kind: str,
    gpu_instances: int,
    bls_instances: int,
) -> dict[str, Any]:
    """Copy the CPU-target repository ``src`` to ``dst`` with GPU tensor models."""
    info_path = src / "build_info.json"
    build_info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    if build_info.get("target") not in (None, "cpu"):
        raise SystemExit(f"{src} was built for {build_info.get('target')!r}: use --target cpu")
    for name in (MODEL, *TENSOR_MODELS):
        if not (src / name / "config.pbtxt").is_file():
            raise SystemExit(f"{src / name / 'config.pbtxt'} is missing: build the CPU repository")
    for name in TENSOR_MODELS:
        if not (src / name / "1" / "model.pt").is_file():
            raise SystemExit(f"{src / name / '1' / 'model.pt'} is missing")
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "README.md"))
    for name in TENSOR_MODELS:
        device = devices[name]
        model_kind = kind if device == "cuda" else "KIND_CPU"
        text = tensor_model_config(
            (src / name / "config.pbtxt").read_text(),
            device=device,
            kind=model_kind,
            instances=gpu_instances if device == "cuda" else 1,
        )
        (dst / name / "config.pbtxt").write_text(text)
        (dst / name / "1" / "model.py").write_text(GPU_MODEL_PY)
    bls = dst / MODEL / "config.pbtxt"
    text, count = re.subn(
        r"(instance_group\s*\[\s*\{\s*count:\s*)\d+", rf"\g<1>{bls_instances}", bls.read_text()
    )
    if count != 1:
        raise SystemExit(f"{bls}: expected one instance_group")
    bls.write_text(text)
    return {"source": str(src), "build_info": build_info, "devices": devices, "kind": kind}


def check_repository(repo: Path) -> list[str]:
    """Parse every config.pbtxt with Triton's protobuf classes; compile every model.py."""
    checked = []
    try:
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2
    except ImportError:
        text_format = model_config_pb2 = None
    for config in sorted(repo.glob("*/config.pbtxt")):
        if model_config_pb2 is not None:
            text_format.Parse(config.read_text(), model_config_pb2.ModelConfig())
        checked.append(str(config.relative_to(repo)))
    for source in sorted(repo.glob("*/1/*.py")):
        compile(source.read_text(), str(source), "exec")
        checked.append(str(source.relative_to(repo)))
    return checked


# -- frames ----------------------------------------------------------------------------------


def decode_frames(clip: Path, limit: int, path: Path) -> dict[str, Any]:
    """Decode up to ``limit`` BGR frames of ``clip`` (OpenCV's FFmpeg) into ``path`` (.npy)."""
    import cv2

    capture = cv2.VideoCapture(str(clip))
    if not capture.isOpened():
        raise SystemExit(f"cannot open {clip}")
    frames = []
    started = time.perf_counter()
    while len(frames) < limit:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame)
    capture.release()
    if not frames:
        raise SystemExit(f"no frame decoded from {clip}")
    array = np.stack(frames)
    np.save(path, array)
    return {
        "clip": str(clip),
        "frames": len(frames),
        "shape": list(array.shape[1:]),
        "decode_s": round(time.perf_counter() - started, 2),
    }


# -- preflight -------------------------------------------------------------------------------


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_models(repo: Path, device_name: str, repeats: int) -> dict[str, Any]:
    """Each model.pt on ``device_name`` vs the CPU, and its latency per batch size."""
    import torch

    device = torch.device(device_name)
    report: dict[str, Any] = {}
    for name in TENSOR_MODELS:
        entry: dict[str, Any] = {}
        report[name] = entry
        config = (repo / name / "config.pbtxt").read_text()
        shape = [int(d) for d in _dims(config, "input").split(",")]
        try:
            path = str(repo / name / "1" / "model.pt")
            cpu_module = torch.jit.load(path, map_location="cpu").eval()
            module = torch.jit.load(path, map_location=device).eval()
            generator = torch.Generator().manual_seed(0)
            sample = torch.rand((2, *shape), generator=generator)
            if name != "detector":
                sample = sample * 2 - 1  # crops are (pixel - 127.5) / 128
            with torch.inference_mode():
                expected = cpu_module(sample)
                got = module(sample.to(device))
                expected = expected[0] if isinstance(expected, (tuple, list)) else expected
                got = got[0] if isinstance(got, (tuple, list)) else got
                got = got.float().cpu()
            entry["max_abs_diff_vs_cpu"] = float((got - expected).abs().max())
            entry["output_abs_max"] = float(expected.abs().max())
            entry["latency_ms"] = {}
            # On the CPU (--device cpu, for checking this script) one small batch is enough.
            sizes = MICRO_BATCHES[name] if device.type == "cuda" else MICRO_BATCHES[name][:1]
            for batch_size in sizes:
                batch = torch.rand((batch_size, *shape)).to(device)
                with torch.inference_mode():
                    for _ in range(3):
                        module(batch)
                    _sync(device)
                    started = time.perf_counter()
                    for _ in range(repeats):
                        module(batch)
                    _sync(device)
                elapsed_ms = (time.perf_counter() - started) * 1000 / repeats
                entry["latency_ms"][str(batch_size)] = round(elapsed_ms, 3)
            entry["ok"] = True
        except Exception as exc:  # recorded; that model then runs on the CPU
            entry["ok"] = False
            entry["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        LOG.info("model check %s on %s: %s", name, device_name, entry)
    if device.type == "cuda":
        report["cuda"] = {
            "name": torch.cuda.get_device_name(device),
            "capability": list(torch.cuda.get_device_capability(device)),
            "max_memory_allocated_mb": round(torch.cuda.max_memory_allocated(device) / 2**20),
        }
        torch.cuda.empty_cache()
    return report


STUB_CHECK = """
import json, sys
sys.path[0:0] = json.loads(sys.argv[1])
out = {}
import numpy, torch, cv2
out["numpy"] = numpy.__version__
out["numpy_file"] = numpy.__file__
out["torch"] = torch.__version__
out["cv2"] = cv2.__version__
out["cuda"] = torch.cuda.is_available()
a = numpy.random.randint(0, 255, (1080, 1920, 3), numpy.uint8)
out["cv2_resize"] = list(cv2.resize(a, (640, 360)).shape)
out["torch_from_numpy"] = float(torch.from_numpy(numpy.ones(3, numpy.float32)).sum())
print(json.dumps(out))
"""


def check_stub_packages(front: list[str]) -> dict[str, Any]:
    """What the Python-backend stub will import (numpy<2 first, then this interpreter's)."""
    proc = subprocess.run(
        [sys.executable, "-c", STUB_CHECK, json.dumps(front)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        return {"ok": False, "error": proc.stderr[-3000:]}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["ok"] = result["numpy"].startswith("1.")
    return result


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    with contextlib.suppress(Exception):
        info["nvidia_smi"] = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    with contextlib.suppress(Exception):
        import torch

        info["torch"] = torch.__version__
        info["torch_cuda"] = torch.version.cuda
    return info


# -- GPU sampling ----------------------------------------------------------------------------


class GpuSampler:
    """nvidia-smi every 500 ms in the background: (time, util %, memory MiB, power W)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float, float]] = []
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if shutil.which("nvidia-smi") is None:
            return
        self._proc = subprocess.Popen(
            [
                "nvidia-smi",
                "--query-gpu=utilization.gpu,memory.used,power.draw",
                "--format=csv,noheader,nounits",
                "-lms",
                "500",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            with contextlib.suppress(ValueError, IndexError):
                self.samples.append(
                    (time.time(), float(parts[0]), float(parts[1]), float(parts[2]))
                )

    def window(self, start: float, stop: float) -> dict[str, Any]:
        rows = [s for s in self.samples if start <= s[0] <= stop]
        if not rows:
            return {}
        util = [r[1] for r in rows]
        return {
            "samples": len(rows),
            "util_mean_pct": round(sum(util) / len(util), 1),
            "util_max_pct": max(util),
            "memory_max_mib": max(r[2] for r in rows),
            "power_mean_w": round(sum(r[3] for r in rows) / len(rows), 1),
        }

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)


# -- Triton statistics -----------------------------------------------------------------------


def model_stats(http_url: str) -> dict[str, Any]:
    """Per-model cumulative statistics from Triton's HTTP endpoint."""
    stats = {}
    for name in (MODEL, *TENSOR_MODELS):
        with urllib.request.urlopen(f"http://{http_url}/v2/models/{name}/stats", timeout=10) as r:
            data = json.load(r)
        stats[name] = data["model_stats"][0]
    return stats


def stats_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Batch sizes, queue and compute times of each model between two snapshots."""
    result = {}
    for name, now in after.items():
        old = before.get(name, {})

        def diff(path: tuple[str, ...], now: Any = now, old: Any = old) -> float:
            a, b = now, old
            for key in path:
                a = a.get(key, {}) if isinstance(a, dict) else {}
                b = b.get(key, {}) if isinstance(b, dict) else {}
            return float(a or 0) - float(b or 0)

        inferences = diff(("inference_count",))
        executions = diff(("execution_count",))
        entry: dict[str, Any] = {
            "inferences": int(inferences),
            "executions": int(executions),
            "avg_batch": round(inferences / executions, 2) if executions else None,
        }
        for stage in ("queue", "compute_input", "compute_infer", "compute_output"):
            count = diff(("inference_stats", stage, "count"))
            ns = diff(("inference_stats", stage, "ns"))
            entry[f"{stage}_ms_per_request"] = round(ns / count / 1e6, 3) if count else None
        old_batches = {b["batch_size"]: b for b in old.get("batch_stats", [])}
        batches = {}
        for b in now.get("batch_stats", []):
            prev = old_batches.get(b["batch_size"], {})
            count = b["compute_infer"]["count"] - prev.get("compute_infer", {}).get("count", 0)
            ns = b["compute_infer"]["ns"] - prev.get("compute_infer", {}).get("ns", 0)
            if count:
                batches[str(b["batch_size"])] = {
                    "executions": count,
                    "compute_infer_ms": round(ns / count / 1e6, 3),
                }
        entry["batches"] = batches
        result[name] = entry
    return result


# -- client streams (one process each) -------------------------------------------------------


def stream_worker(job: dict[str, Any]) -> dict[str, Any]:
    """One gRPC stream, ``in_flight`` frames outstanding; counts completions in the window."""
    logging.disable(logging.WARNING)
    try:
        return asyncio.run(_stream(job))
    except Exception as exc:
        return {"index": job["index"], "fatal": f"{type(exc).__name__}: {exc}"[:2000]}


async def _stream(job: dict[str, Any]) -> dict[str, Any]:
    import tritonclient.grpc.aio as aioclient
    from tritonclient.grpc import InferInput, InferRequestedOutput

    frames = np.load(job["frames"], mmap_mode="r")
    inputs = []
    for frame in frames:
        tensor = InferInput("image", list(frame.shape), "UINT8")
        tensor.set_data_from_numpy(np.ascontiguousarray(frame))
        inputs.append(tensor)
    outputs = [InferRequestedOutput(name) for name in OUTPUTS]
    index, in_flight = job["index"], job["in_flight"]
    start_at, stop_at = job["start_at"], job["stop_at"]

    client = aioclient.InferenceServerClient(job["url"])
    queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    sent: dict[str, tuple[float, float]] = {}
    submitted = received = completed = errors = 0
    latencies: list[float] = []
    texts: collections.Counter[str] = collections.Counter()
    frames_with_plates = 0
    error_sample = ""
    sequence = 0

    async def requests() -> Any:
        while True:
            item = await queue.get()
            if item is None:
                return
            yield item

    def submit() -> None:
        nonlocal submitted, sequence
        request_id = f"{index}-{sequence}"
        frame_index = (index * 13 + sequence) % len(inputs)
        sequence += 1
        submitted += 1
        sent[request_id] = (time.time(), time.perf_counter())
        queue.put_nowait(
            {
                "model_name": MODEL,
                "inputs": [inputs[frame_index]],
                "outputs": outputs,
                "request_id": request_id,
            }
        )

    ready_at = time.time()
    try:
        async with asyncio.timeout(stop_at - time.time() + job["drain_timeout_s"]):
            for _ in range(in_flight):
                submit()
            async for result, error in client.stream_infer(requests()):
                now = time.time()
                received += 1
                if error is not None:
                    errors += 1
                    error_sample = error_sample or str(error)[:500]
                else:
                    request_id = result.get_response().id
                    sent_wall, sent_perf = sent.pop(request_id, (now, time.perf_counter()))
                    if start_at <= now <= stop_at:
                        completed += 1
                        if sent_wall >= start_at:
                            latencies.append((time.perf_counter() - sent_perf) * 1000)
                        found = result.as_numpy("texts")
                        if found is not None and len(found):
                            frames_with_plates += 1
                            texts.update(
                                t.decode() if isinstance(t, bytes) else str(t) for t in found
                            )
                if now < stop_at:
                    submit()
                elif received >= submitted:
                    break
    except TimeoutError:
        error_sample = error_sample or "drain timeout: answers still missing after the window"
    finally:
        queue.put_nowait(None)
        with contextlib.suppress(Exception):
            await client.close()
    return {
        "index": index,
        "ready_late_s": round(max(0.0, ready_at - start_at), 3),
        "submitted": submitted,
        "received": received,
        "completed_in_window": completed,
        "errors": errors,
        "error_sample": error_sample,
        "latencies_ms": latencies,
        "frames_with_plates": frames_with_plates,
        "texts": dict(texts.most_common(10)),
    }


def run_level(
    streams: int,
    *,
    url: str,
    http_url: str,
    frames: Path,
    in_flight: int,
    warmup_s: float,
    duration_s: float,
    sampler: GpuSampler,
) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    before = model_stats(http_url)
    start_at = time.time() + warmup_s
    stop_at = start_at + duration_s
    jobs = [
        {
            "index": i,
            "url": url,
            "frames": str(frames),
            "in_flight": in_flight,
            "start_at": start_at,
            "stop_at": stop_at,
            "drain_timeout_s": 60.0,
        }
        for i in range(streams)
    ]
    with context.Pool(streams) as pool:
        results = pool.map(stream_worker, jobs)
    after = model_stats(http_url)
    latencies = np.asarray([x for r in results for x in r.get("latencies_ms", [])], np.float64)
    completed = sum(r.get("completed_in_window", 0) for r in results)
    texts: collections.Counter[str] = collections.Counter()
    for r in results:
        texts.update(r.get("texts", {}))
    level: dict[str, Any] = {
        "streams": streams,
        "in_flight_per_stream": in_flight,
        "duration_s": duration_s,
        "frames_completed": completed,
        "fps": round(completed / duration_s, 2),
        "fps_per_stream": round(completed / duration_s / streams, 2),
        "errors": sum(r.get("errors", 0) for r in results),
        "fatal": [r["fatal"] for r in results if "fatal" in r],
        "error_sample": next((r["error_sample"] for r in results if r.get("error_sample")), ""),
        "late_start_s": max((r.get("ready_late_s", 0.0) for r in results), default=0.0),
        "frames_with_plates": sum(r.get("frames_with_plates", 0) for r in results),
        "top_texts": dict(texts.most_common(5)),
        "gpu": sampler.window(start_at, stop_at),
        "triton": stats_delta(before, after),
    }
    if len(latencies):
        level["latency_ms"] = {
            "p50": round(float(np.percentile(latencies, 50)), 2),
            "p90": round(float(np.percentile(latencies, 90)), 2),
            "p99": round(float(np.percentile(latencies, 99)), 2),
            "max": round(float(latencies.max()), 2),
        }
    return level


# -- output ----------------------------------------------------------------------------------


def table(levels: list[dict[str, Any]]) -> str:
    head = (
        f"{'streams':>7} {'in-flight':>9} {'frames/s':>9} {'per stream':>10} "
        f"{'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'det batch':>9} {'GPU %':>6} {'errors':>6}"
    )
    lines = [head, "-" * len(head)]
    for level in levels:
        lat = level.get("latency_ms", {})
        det = level.get("triton", {}).get("detector", {}).get("avg_batch")
        util = level.get("gpu", {}).get("util_mean_pct")

        def fmt(value: Any, spec: str) -> str:
            return "-" if value is None else format(value, spec)

        lines.append(
            f"{level['streams']:>7} {level['in_flight_per_stream']:>9} {level['fps']:>9.1f} "
            f"{level['fps_per_stream']:>10.1f} {fmt(lat.get('p50'), '7.1f'):>7} "
            f"{fmt(lat.get('p90'), '7.1f'):>7} {fmt(lat.get('p99'), '7.1f'):>7} "
            f"{fmt(det, '9.2f'):>9} {fmt(util, '6.1f'):>6} {level['errors']:>6}"
        )
    return "\n".join(lines)


class Report:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def __setitem__(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
        tmp.replace(self.path)


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models",
        type=Path,
        default=REPO / "model_repository",
        help="CPU-target model repository (converters build --target cpu)",
    )
    parser.add_argument("--clip", type=Path, required=True, help="yard_cam.ts")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lpr-bench-gpu"))
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or HERE / "out"))
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--instance-kind",
        choices=("auto", "gpu", "cpu"),
        default="auto",
        help="instance kind of the tensor models; auto: KIND_GPU, else KIND_CPU",
    )
    parser.add_argument("--gpu-instances", type=int, default=1)
    parser.add_argument("--bls-instances", type=int, default=1)
    parser.add_argument("--streams", default="1,4,8")
    parser.add_argument(
        "--in-flight",
        type=int,
        default=2,
        help="frames outstanding per stream (the service's max_in_flight_per_camera)",
    )
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds per level")
    parser.add_argument(
        "--warmup",
        type=float,
        default=6.0,
        help="seconds each level runs before its window (includes process start)",
    )
    parser.add_argument(
        "--server-warmup",
        type=float,
        default=10.0,
        help="seconds of load at the highest level before the first window",
    )
    parser.add_argument("--frames", type=int, default=120, help="frames decoded from the clip")
    parser.add_argument(
        "--stub-site",
        type=Path,
        action="append",
        default=[],
        help="folder put first on the Python-backend stub's sys.path (numpy<2)",
    )
    parser.add_argument(
        "--stub-env",
        type=Path,
        default=None,
        help="virtualenv whose packages the models import (default: EmbeddedTriton's: "
        "$LPR_TRITON_PYTHON_ENV, else .venv-triton, else this interpreter's)",
    )
    parser.add_argument(
        "--python-shm-mb",
        type=int,
        default=64,
        help="Python backend shm-default-byte-size / growth (MiB)",
    )
    parser.add_argument("--startup-timeout", type=float, default=240.0)
    parser.add_argument(
        "--budget",
        type=float,
        default=420.0,
        help="seconds this script may take; levels that would not fit are skipped",
    )
    parser.add_argument("--micro-repeats", type=int, default=20)
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="repository, configs, frames and preflight only: no server",
    )
    return parser.parse_args(argv)


def _setup_logging(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.INFO)
    console.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    console.addFilter(
        lambda r: (
            not r.name.startswith("streamer.inference.embedded.server")
            or r.levelno >= logging.WARNING
        )
    )
    root.addHandler(console)
    server_log = logging.FileHandler(out / "triton.log")
    server_log.setLevel(logging.DEBUG)
    server_log.addFilter(lambda r: r.name.startswith("streamer.inference.embedded.server"))
    logging.getLogger("streamer.inference.embedded.server").setLevel(logging.DEBUG)
    root.addHandler(server_log)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.monotonic()
    _setup_logging(args.out)
    report = Report(args.out / "bench_gpu.json")
    report["args"] = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    report["machine"] = machine_info()
    streams = [int(s) for s in args.streams.split(",") if s.strip()]
    args.work.mkdir(parents=True, exist_ok=True)

    frames_path = args.work / "frames.npy"
    report["frames"] = decode_frames(args.clip, args.frames, frames_path)
    LOG.info("frames: %s", report.data["frames"])

    if args.device == "cuda":
        report["stub_packages"] = check_stub_packages([str(p) for p in args.stub_site])
        LOG.info("stub packages: %s", report.data["stub_packages"])
        if not report.data["stub_packages"].get("ok") and not args.dry_run:
            LOG.error("the Python-backend stub would not get numpy<2/torch/cv2; stopping")
            return 3
    import torch

    if args.device == "cpu" or torch.cuda.is_available():
        report["model_check"] = check_models(args.models, args.device, args.micro_repeats)
    elif args.dry_run:  # checking the GPU repository's configs where no GPU is
        report["model_check"] = {"skipped": "torch sees no CUDA device"}
    else:
        LOG.error("torch sees no CUDA device; stopping")
        return 3
    devices = {
        name: "cpu" if report.data["model_check"].get(name, {}).get("ok") is False else args.device
        for name in TENSOR_MODELS
    }
    if any(d != args.device for d in devices.values()):
        LOG.warning("models that failed on %s run on the CPU instead: %s", args.device, devices)

    kinds = ["KIND_GPU", "KIND_CPU"] if args.device == "cuda" else ["KIND_CPU"]
    if args.instance_kind == "gpu":
        kinds = kinds[:1]
    elif args.instance_kind == "cpu":
        kinds = ["KIND_CPU"]
    repo = args.work / "model_repository"

    def build(kind: str) -> None:
        report["repository"] = make_repository(
            args.models,
            repo,
            devices=devices,
            kind=kind,
            gpu_instances=args.gpu_instances,
            bls_instances=args.bls_instances,
        ) | {"checked": check_repository(repo)}

    build(kinds[0])
    if args.dry_run:
        for config in sorted(repo.glob("*/config.pbtxt")):
            LOG.info("%s:\n%s", config.relative_to(repo), config.read_text())
        LOG.info(
            "dry run: %s checked, no server started", len(report.data["repository"]["checked"])
        )
        report["finished"] = "dry-run"
        return 0

    sys.path.insert(0, str(REPO))
    from streamer.inference.embedded.errors import TritonStartError
    from streamer.inference.embedded.server import EmbeddedTriton

    # Frames (6 MB each) reach the BLS through the Python backend's shared memory: start it
    # large enough for several at once, when /dev/shm has room (each stub gets a region).
    shm = args.python_shm_mb * 2**20
    shm_free = shutil.disk_usage("/dev/shm").free if Path("/dev/shm").is_dir() else 0
    extra = []
    if shm and shm_free > 16 * shm:
        extra = [
            f"--backend-config=python,shm-default-byte-size={shm}",
            f"--backend-config=python,shm-growth-byte-size={shm}",
        ]
    report["shm"] = {"dev_shm_free_mib": shm_free // 2**20, "server_args": extra}
    server = None
    start_errors = []
    for kind in kinds:
        if kind != kinds[0]:
            build(kind)
        candidate = EmbeddedTriton(
            repo,
            startup_timeout_s=args.startup_timeout,
            work_dir=args.work / "tritonserver",
            extra_args=extra,
            stub_python_paths=args.stub_site,
            python_env=args.stub_env,
        )
        started = time.monotonic()
        try:
            candidate.start()
        except TritonStartError as exc:
            LOG.error("Triton did not start with %s: %s", kind, str(exc)[-3000:])
            start_errors.append({"kind": kind, "error": str(exc)[-6000:]})
            report["start_errors"] = start_errors
            continue
        server = candidate
        report["server"] = {
            "kind": kind,
            "startup_s": round(time.monotonic() - started, 1),
            "grpc": server.grpc_url,
        }
        break
    if server is None:
        report["finished"] = "server did not start"
        return 4

    sampler = GpuSampler()
    sampler.start()
    levels: list[dict[str, Any]] = []
    try:
        common = {
            "url": server.grpc_url,
            "http_url": server.http_url,
            "frames": frames_path,
            "in_flight": args.in_flight,
            "sampler": sampler,
        }
        if args.server_warmup > 0:
            LOG.info("warm-up: %s streams for %.0f s", max(streams), args.server_warmup)
            warm = run_level(max(streams), warmup_s=2.0, duration_s=args.server_warmup, **common)
            report["warmup"] = {k: warm[k] for k in ("fps", "errors", "error_sample", "fatal")}
            LOG.info("warm-up: %s", report.data["warmup"])
        skipped = []
        for count in streams:
            needed = args.warmup + args.duration + 25
            if time.monotonic() - began + needed > args.budget:
                skipped.append(count)
                continue
            level = run_level(count, warmup_s=args.warmup, duration_s=args.duration, **common)
            levels.append(level)
            report["levels"] = levels
            LOG.info(
                "%s streams: %.1f frames/s, errors %s, latency %s",
                count,
                level["fps"],
                level["errors"],
                level.get("latency_ms"),
            )
        if skipped:
            report["skipped_levels"] = skipped
            LOG.warning("skipped (time budget): %s", skipped)
    finally:
        sampler.stop()
        server.stop()
    report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    report["elapsed_s"] = round(time.monotonic() - began, 1)
    print()
    print(
        f"plate_recognition on {report.data['machine'].get('nvidia_smi') or args.device}, "
        f"1920x1080 frames of {args.clip.name}, tensor models {report.data['server']['kind']}"
    )
    print(table(levels))
    print(f"\nfull results: {report.path}")
    return 0 if levels and not any(lv["fatal"] for lv in levels) else 5


if __name__ == "__main__":
    sys.exit(main())
