"""P2's baseline: a client built the way the seed's tests used Triton.

The seed's ``plate_recognition`` was not decoupled, so its tests called it with the
synchronous ``tritonclient.http`` client, one frame at a time. Ours is decoupled (gRPC
streaming only), so the seed's design is emulated against the same server's callee models:
per frame, synchronous ``tritonclient.http`` ``infer`` calls to ``detector``, then ``stn`` and
``lprnet``, the pre/post-processing (``plate_ops``: letterbox, head decode, NMS, crops, CTC) in
the client, outputs requested as JSON (``binary_data=False``), inputs as binary tensors.

The seed sent one request in flight per camera, which on a Triton with two detector instances
leaves one of them idle whenever there are fewer cameras than instances: a baseline that
cannot use the server it is compared on. So the emulation keeps at least one request in flight
per instance (:func:`seed_workers`): each camera's decode thread hands its sampled frames to
``workers`` threads of its own, each with its own synchronous client (1 camera, 2 instances:
2 workers, 2 requests in flight; 4 cameras: one each, 4 in flight). Each call stays
synchronous, as the seed's.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np
import tritonclient.http as httpclient

from bench.params import PipelineParams
from converters.paths import import_plate_ops

plate_ops = import_plate_ops()

HTTP_TIMEOUT_S = 300.0


@dataclass
class SeedCamera:
    frames: int = 0
    decoded: int = 0
    plates: int = 0
    texts: set[str] = field(default_factory=set)
    stage_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    error: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class SeedClient:
    """One camera of the seed-style client: decode, then three synchronous HTTP calls."""

    def __init__(self, url: str, params: PipelineParams) -> None:
        self.client = httpclient.InferenceServerClient(
            url, connection_timeout=HTTP_TIMEOUT_S, network_timeout=HTTP_TIMEOUT_S
        )
        self.params = params

    def close(self) -> None:
        self.client.close()

    def infer(self, model: str, batch: np.ndarray, stage_s: dict[str, float]) -> np.ndarray:
        """One synchronous HTTP request; its time split into the call and the JSON -> array."""
        started = time.perf_counter()
        tensor = httpclient.InferInput("INPUT__0", list(batch.shape), "FP32")
        tensor.set_data_from_numpy(np.ascontiguousarray(batch, dtype=np.float32))
        result = self.client.infer(
            model,
            [tensor],
            outputs=[httpclient.InferRequestedOutput("OUTPUT__0", binary_data=False)],
        )
        called = time.perf_counter()
        out = result.as_numpy("OUTPUT__0")
        if out is None:
            raise RuntimeError(f"{model}: no OUTPUT__0")
        group = "detector" if model == "detector" else "stn_lprnet"
        stage_s[f"{group}_http_call"] += called - started
        stage_s[f"{group}_json_to_numpy"] += time.perf_counter() - called
        return out

    def recognise(self, image: np.ndarray, stage_s: dict[str, float]) -> list[str]:
        p = self.params
        t0 = time.perf_counter()
        tensor, transform = plate_ops.letterbox(image, p.input_hw)
        stage_s["letterbox"] += time.perf_counter() - t0
        head = self.infer("detector", tensor[None], stage_s)[0]
        t1 = time.perf_counter()
        dets = plate_ops.decode_head(head, p.conf_threshold, p.head_layout)
        dets = plate_ops.non_max_suppression(dets, p.iou_threshold, p.max_plates)
        dets.boxes = plate_ops.unletterbox_boxes(
            dets.boxes, transform, (image.shape[0], image.shape[1])
        )
        texts: list[str] = []
        if len(dets):
            crops = plate_ops.crop_plates(image, dets.boxes, p.crop_pad_ratio)
            stage_s["postprocess_crops_ctc"] += time.perf_counter() - t1
            step = p.recogniser_max_batch
            logits = np.concatenate(
                [
                    self.infer("lprnet", self.infer("stn", crops[i : i + step], stage_s), stage_s)
                    for i in range(0, len(crops), step)
                ]
            )
            t1 = time.perf_counter()
            texts = plate_ops.ctc_greedy_decode(logits)[0]
        stage_s["postprocess_crops_ctc"] += time.perf_counter() - t1
        return texts


def warm_triton(
    url: str, params: PipelineParams, detector_batches: int = 4, crops: int = 16, repeats: int = 3
) -> float:
    """Run every callee at every batch size the suite will send, ``repeats`` times; seconds.

    TorchScript's profiling executor optimises (and re-optimises) a model for the first input
    shapes it sees, which makes the first calls at each batch size slow: this takes that cost
    out of the measured runs. Inputs are zeros: only their shapes matter here.
    """
    started = time.perf_counter()
    client = SeedClient(url, params)
    stages: dict[str, float] = defaultdict(float)
    h, w = params.input_hw
    try:
        for _ in range(repeats):
            for n in range(1, detector_batches + 1):
                client.infer("detector", np.zeros((n, 3, h, w), np.float32), stages)
            for n in range(1, crops + 1):
                straightened = client.infer("stn", np.zeros((n, 3, 24, 94), np.float32), stages)
                client.infer("lprnet", straightened, stages)
    finally:
        client.close()
    return time.perf_counter() - started


def seed_workers(params: PipelineParams, cameras: int) -> int:
    """Worker threads per camera so that every instance of every callee can have a request:
    ``ceil(most instances of a callee / cameras)``, at least 1."""
    instances = max(params.instances.values(), default=1)
    return max(1, math.ceil(instances / max(1, cameras)))


def _worker(
    url: str, params: PipelineParams, images: queue.Queue[np.ndarray | None], out: SeedCamera
) -> None:
    """Synchronous recognition of the images a camera hands over, until it hands ``None``."""
    client = SeedClient(url, params)
    stage_s: dict[str, float] = defaultdict(float)
    try:
        while (image := images.get()) is not None:
            if out.error is not None:
                continue  # drain: the camera stops at the next frame
            try:
                texts = client.recognise(image, stage_s)
            except Exception as exc:  # reported, and the run counts as failed
                out.error = f"{type(exc).__name__}: {exc}"
                continue
            with out.lock:
                out.frames += 1
                out.plates += len(texts)
                out.texts.update(texts)
    finally:
        client.close()
        with out.lock:
            for key, value in stage_s.items():
                out.stage_s[key] += value


def _camera(
    url: str, params: PipelineParams, clip: Path, sample_fps: float, out: SeedCamera, workers: int
) -> None:
    images: queue.Queue[np.ndarray | None] = queue.Queue(maxsize=workers)
    threads = [
        threading.Thread(target=_worker, args=(url, params, images, out), daemon=True)
        for _ in range(workers)
    ]
    for thread in threads:
        thread.start()
    period = 1.0 / sample_fps
    tolerance = min(1e-3, period / 10)
    next_slot: float | None = None
    try:
        with av.open(str(clip)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            frames = container.decode(stream)
            while out.error is None:
                started = time.perf_counter()
                frame = next(frames, None)
                if frame is None:
                    break
                out.decoded += 1
                t = float(frame.pts * frame.time_base) if frame.pts is not None else 0.0
                if next_slot is not None and t < next_slot - tolerance:
                    out.stage_s["decode_convert"] += time.perf_counter() - started
                    continue
                slot = t if next_slot is None else next_slot
                next_slot = slot + period if slot + period > t else t + period
                image = frame.to_ndarray(format="bgr24")
                with out.lock:
                    out.stage_s["decode_convert"] += time.perf_counter() - started
                images.put(image)  # waits while every worker has a request in flight
    except Exception as exc:  # reported, and the run counts as failed
        out.error = f"{type(exc).__name__}: {exc}"
    finally:
        for _ in threads:
            images.put(None)
        for thread in threads:
            thread.join()


def run_seed(
    http_url: str,
    params: PipelineParams,
    clips: list[Path],
    sample_fps: float,
    workers: int | None = None,
) -> dict[str, Any]:
    """All ``clips`` (one camera each) through the seed-style client; frames/s over all.
    ``workers`` per camera: by default :func:`seed_workers` (every instance used)."""
    per_camera = workers or seed_workers(params, len(clips))
    cameras = [SeedCamera() for _ in clips]
    threads = [
        threading.Thread(
            target=_camera,
            args=(http_url, params, clip, sample_fps, cam, per_camera),
            name=f"seed-{i}",
            daemon=True,  # an interrupted bench must not wait for them
        )
        for i, (clip, cam) in enumerate(zip(clips, cameras, strict=True))
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    frames = sum(c.frames for c in cameras)
    errors = [c.error for c in cameras if c.error]
    stage_s: dict[str, float] = defaultdict(float)
    for cam in cameras:
        for key, value in cam.stage_s.items():
            stage_s[key] += value
    return {
        "frames": frames,
        "decoded": sum(c.decoded for c in cameras),
        "wall_s": wall,
        "frames_per_s": frames / wall if wall > 0 else 0.0,
        "plates": sum(c.plates for c in cameras),
        "distinct_texts": len(set().union(*(c.texts for c in cameras))),
        "stage_ms_per_frame": {k: 1e3 * v / frames for k, v in stage_s.items()} if frames else {},
        "errors": errors,
        "workers_per_camera": per_camera,
        "in_flight": per_camera * len(clips),
    }
