"""The side-by-side performance suite of issue 7: ``make bench`` = ``.venv/bin/python -m bench``.

Every figure is a ratio of two things measured in this run, on this machine, interleaved
round by round (the order rotates each round, so drifting load from other processes hits
both sides alike); ratio = median / median, with each side's median, min-max and run count.

* P1 overhead: the service (``Service(..., once=True)``, one file camera played as fast as
  possible, embedded Triton, events) against the bare in-process loop (``bench/bare_loop.py``:
  PyAV + the three TorchScript models with torch, 2 threads, in the Triton models' Python
  environment) on the same frames. Target >= 0.90.
* P2 against the seed's design (``bench/seed_client.py``: synchronous ``tritonclient.http``
  calls per frame to the same Triton's callee models, JSON outputs, a request in flight for
  every model instance), 1 and 4 cameras. Target >= 1.0 on this CPU.
* P3 ingest cost: CPU s per decoded 1080p frame of ``CameraSource`` (sample_fps 5, drained
  queue) against ``ffmpeg -i FILE -f null -`` on the same file. Target <= 1.2.
* P4 soak: 4 cameras for ``--soak-minutes``; service RSS growth (< 5 %), plot, frame-to-event
  latency p50/p99.
* T transport (bench/transport.py): decoded frames as their YUV 4:2:0 planes against BGR, the
  same frames through the product's client, interleaved; bytes, CPU and texts. Target >= 1.0
  with the same texts. (A ``*transport*`` choice in ``TritonConfig`` would be measured instead.)
* D detector regions (bench/regions.py): the service with ``motion.regions`` on against off,
  interleaved, for cameras the gate cannot skip and for gated ones; whole-chain frames/s, the
  detections on regions, event texts. Target >= 1.5 with the same texts. Its own Triton.
* R runtimes (bench/runtime_rows.py): TorchScript vs OpenVINO fp32/bf16, whole-chain frames/s,
  through ``bench.runtimes.suite_rows`` when that exists. Target >= 1.0 with the same texts.
* O overload ladder (bench/capacity.py): 1-16 real-time cameras, each from its own offset in
  the clip, runs interleaved over 3 rounds; answered frames/s >= 0.9 x min(offered, saturated),
  share >= 0.8, p99 at Triton <= 2 x unloaded, p99 capture to answer, RSS < 5 %, wrong texts.
* M motion gating (bench/motion_gate.py): a clip with long stretches of real stillness (sensor
  noise, nothing moving), gated and not; detector calls <= 0.30 x with identical event texts.
* C cameras per core (bench/camera_mix.py): cameras / CPU cores busy, every camera kept up;
  cameras the gate cannot skip and a realistic mix (gating on), each in a run of its own.

Writes ``bench/results/<stamp>.json`` (raw: every run), ``docs/PERFORMANCE-soak-rss.png``,
``docs/PERFORMANCE.md`` (the table) and ``docs/PERFORMANCE.json`` (the raw results behind it,
committed with it). ``--quick``: a smoke run of a few minutes, tiny clips,
0.5 min soak; its figures are not representative. Nothing is asserted: the exit code
is 0 when every phase ran, whatever the verdicts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shlex
import shutil
import signal
import site
import statistics
import sys
import tempfile
import time
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import merge_results, report
from bench.common import (
    CLIP_FPS,
    PROJECT_ROOT,
    RESULTS_DIR,
    Figure,
    count_frames,
    cpu_delta,
    log,
    loop_clip,
    percentile,
    run_meta,
    run_with_rusage,
    self_cpu_s,
    source_clip,
    tree_cpu_by_label,
    trim_clip,
)
from bench.params import PipelineParams, load_params

PHASES = ("P1", "P2", "P3", "P4", "T", "D", "R", "O", "M", "C")
#: The phases that need the suite's Triton (R starts its own, before it).
TRITON_PHASES = ("P1", "P2", "P4", "T", "O", "M", "C")
MODEL_REPOSITORY = PROJECT_ROOT / "model_repository"
DOC = PROJECT_ROOT / "docs" / "PERFORMANCE.md"
CLIP_MIN_S, CLIP_MAX_S = 1.0, 8.0
#: Per-run cost outside the timed part (process start, imports, model load, warm-up frames).
RUN_OVERHEAD_S = 5.0
#: Seconds per frame of a run against the service's warm-up rate (the seed client is slower).
WARM_MARGIN = 1.2
#: Kept free after the soak (its worker's start and stop, the report).
SOAK_RESERVE_S = 45.0


@dataclass
class Plan:
    """How big each phase is. The full plan fits ``make bench`` in about 45 minutes on 2 cores
    (P1-P4 about 17, O 16, M 2, C 5, R about 5)."""

    quick: bool
    rounds: int
    sample_fps: float
    one_cam_budget_s: float  # P1 + P2 (1 camera): service, bare loop, seed client
    four_cam_budget_s: float  # P2 (4 cameras): service, seed client
    fixed_clip_s: float | None  # quick: fixed clip lengths instead of sizing to the budget
    four_clip_s: float | None
    warm_clip_s: float
    p3_rounds: int
    p3_copies: int
    p3_sample_fps: float
    soak_minutes: float
    transport_rounds: int
    budget_s: float | None  # the whole run; the soak is shortened to keep within it
    ladder: tuple[int, ...] = (1, 2, 4, 8, 16)  # O: cameras per step
    ladder_rounds: int = 3  # O: every step and reference once a round, interleaved (>= 3)
    ladder_step_s: float = 45.0  # O: each step's run, warm-up included
    ladder_warmup_s: float = 15.0
    ref_s: float = 24.0  # O: each reference run (saturated rate, unloaded service time)
    ref_warmup_s: float = 8.0
    motion_still_s: float = 20.0  # M: still before and after the clip
    motion_rounds: int = 2
    mix_cameras: int = 0  # C: 0 = sized from O's saturated rate
    mix_still_s: int = 32  # C: still seconds per 40 s period (vehicle in view 20 %)
    mix_s: float = 110.0  # C: each of its two runs (cameras the gate cannot skip, the mix)
    mix_warmup_s: float = 25.0


def make_plan(args: argparse.Namespace) -> Plan:
    if args.quick:
        plan = Plan(
            quick=True,
            rounds=3,
            sample_fps=CLIP_FPS,
            one_cam_budget_s=0,
            four_cam_budget_s=0,
            fixed_clip_s=1.0,
            four_clip_s=0.5,
            warm_clip_s=0.5,
            p3_rounds=3,
            p3_copies=1,
            p3_sample_fps=5.0,
            soak_minutes=0.5,
            transport_rounds=2,
            budget_s=None,
            ladder=(1, 2),
            ladder_step_s=8.0,
            ladder_warmup_s=2.0,
            ref_s=6.0,
            ref_warmup_s=2.0,
            motion_still_s=3.0,
            motion_rounds=1,
            mix_s=20.0,
            mix_warmup_s=5.0,
        )
    else:
        plan = Plan(
            quick=False,
            rounds=3,
            sample_fps=CLIP_FPS,
            one_cam_budget_s=210,
            four_cam_budget_s=130,
            fixed_clip_s=None,
            four_clip_s=None,
            warm_clip_s=1.0,
            p3_rounds=3,
            p3_copies=6,
            p3_sample_fps=5.0,
            soak_minutes=10.0,
            transport_rounds=3,
            budget_s=50 * 60,
        )
    if args.soak_minutes is not None:
        plan.soak_minutes = args.soak_minutes
    if args.rounds is not None:
        plan.rounds = args.rounds
    if args.budget_minutes is not None:
        plan.budget_s = args.budget_minutes * 60 if args.budget_minutes > 0 else None
    if args.ladder is not None:
        plan.ladder = tuple(args.ladder)
    if args.mix_cameras is not None:
        plan.mix_cameras = args.mix_cameras
    return plan


def transport_choice() -> tuple[str, Any, tuple[Any, ...]] | None:
    """``(field, default, choices)`` of a ``*transport*`` Literal in ``TritonConfig``, if any."""
    from streamer.config import TritonConfig

    for name, info in TritonConfig.model_fields.items():
        if "transport" not in name:
            continue
        choices = typing.get_args(info.annotation)
        if choices and all(isinstance(c, str) for c in choices):
            return name, info.default, choices
    return None


def clip_seconds(budget_s: float, rounds: int, seconds_per_frame: float) -> float:
    """Clip length so that ``rounds`` rounds of runs costing ``seconds_per_frame`` fit."""
    usable = max(0.0, budget_s - rounds * RUN_OVERHEAD_S * 2)
    frames = usable / (rounds * seconds_per_frame) if seconds_per_frame > 0 else 0
    return min(CLIP_MAX_S, max(CLIP_MIN_S, frames / CLIP_FPS))


class Suite:
    def __init__(self, args: argparse.Namespace, plan: Plan, workdir: Path) -> None:
        self.args = args
        self.plan = plan
        self.workdir = workdir
        self.only = set(args.only)
        self.figures: list[Figure] = []
        self.raw: dict[str, Any] = {}
        self.timings: dict[str, float] = {}
        self.params: PipelineParams = load_params(MODEL_REPOSITORY)
        self.source = source_clip()
        self.triton: Any = None
        self._runs = 0
        self.started = time.perf_counter()

    # -- the three kinds of run ------------------------------------------------------------

    def service(self, clips: list[Path], extra: dict[str, Any] | None = None) -> dict[str, Any]:
        from bench.service_run import ServiceSpec, run_service

        self._runs += 1
        spec = ServiceSpec(
            clips, self.triton.grpc_url, self.plan.sample_fps, triton_extra=extra or {}
        )
        result = run_service(spec, self.workdir / f"service-{self._runs}", self.triton.pid)
        lat = result.pop("event_latency_s")
        result["event_latency_median_s"] = statistics.median(lat) if lat else None
        result["cpu_ms_per_frame"] = _per_frame(
            result["service_cpu_s"] + result["triton_cpu_s"], result["frames"]
        )
        problems = []
        if result["failed"]:
            problems.append(f"{result['failed']} frames failed")
        if result["frames"] != result["sampled"]:
            problems.append(f"answered {result['frames']} of {result['sampled']} sampled")
        if result["camera_errors"]:
            problems.append(f"camera errors {result['camera_errors']}")
        result["problems"] = problems
        return result

    def seed(self, clips: list[Path]) -> dict[str, Any]:
        from bench.seed_client import run_seed

        cpu0, triton0 = self_cpu_s(), tree_cpu_by_label(self.triton.pid)
        result = run_seed(self.triton.http_url, self.params, clips, self.plan.sample_fps)
        result["client_cpu_s"] = self_cpu_s() - cpu0
        triton = cpu_delta(triton0, tree_cpu_by_label(self.triton.pid))
        result["triton_cpu_s"] = sum(triton.values())
        result["triton_cpu_by_process_s"] = triton
        result["cpu_ms_per_frame"] = _per_frame(
            result["client_cpu_s"] + result["triton_cpu_s"], result["frames"]
        )
        result["problems"] = list(result.pop("errors"))
        return result

    def bare(self, clip: Path) -> dict[str, Any]:
        from streamer.inference.embedded.environment import default_model_env

        env = default_model_env()
        python = env / "bin" / "python" if env is not None else None
        if python is None or not python.exists():
            python = Path(sys.executable)
        sites = [d for d in site.getsitepackages() if Path(d).is_dir()]
        threads = self.params.thread_budget
        command = [
            str(python),
            str(PROJECT_ROOT / "bench" / "bare_loop.py"),
            "--clip",
            str(clip),
            "--repository",
            str(MODEL_REPOSITORY),
            "--sample-fps",
            str(self.plan.sample_fps),
            "--threads",
            str(threads),
        ]
        for directory in sites:
            command += ["--extra-site", directory]
        code, _, process_cpu, out = run_with_rusage(command)
        if code != 0:
            raise RuntimeError(f"bare loop failed ({code}): {shlex.join(command)}")
        result = dict(json.loads(out.strip().splitlines()[-1]))
        result["process_cpu_s"] = process_cpu
        result["cpu_ms_per_frame"] = _per_frame(result["cpu_s"], result["frames"])
        result["problems"] = []
        result["command"] = shlex.join(command)
        return result

    # -- phases -------------------------------------------------------------------------------

    def want(self, *phases: str) -> bool:
        return any(p in self.only for p in phases)

    def run(self) -> None:
        from bench.camera_mix import phase_mix
        from bench.capacity import phase_ladder
        from bench.motion_gate import phase_motion
        from bench.runtime_rows import phase_runtimes

        if self.want("P3"):
            self.timed("P3", self.phase_p3)
        if self.want("R"):  # its own Tritons, one per runtime: before the suite's starts
            self.timed("R runtimes", lambda: phase_runtimes(self))
        if self.want("D"):  # its own Triton, too
            self.timed("D detector regions", self.phase_regions)
        if self.want(*TRITON_PHASES):
            self.timed("triton start", self.start_triton)
            try:
                if self.want("P1", "P2"):
                    self.timed("P1+P2 one camera", self.phase_one_camera)
                if self.want("P2"):
                    self.timed("P2 four cameras", self.phase_four_cameras)
                if self.want("T"):
                    self.timed("T transport", self.phase_transport)
                if self.want("O"):
                    self.timed("O overload ladder", lambda: phase_ladder(self))
                if self.want("M"):
                    self.timed("M motion gating", lambda: phase_motion(self))
                if self.want("C"):
                    self.timed("C cameras per core", lambda: phase_mix(self))
                if self.want("P4"):
                    self.timed("P4 soak", self.phase_p4)
            finally:
                if self.triton is not None:
                    self.triton.stop()

    def timed(self, name: str, fn: Callable[[], None]) -> None:
        log(f"{name}: start")
        started = time.perf_counter()
        try:
            fn()
        finally:
            self.timings[name] = round(time.perf_counter() - started, 1)
            log(f"{name}: {self.timings[name]:.0f} s")

    @staticmethod
    def triton_timeout_s() -> float:
        from streamer.config import TritonConfig

        return float(TritonConfig().request_timeout_s)

    def start_triton(self) -> None:
        from bench.seed_client import warm_triton
        from streamer.inference.embedded.server import EmbeddedTriton

        self.triton = EmbeddedTriton(MODEL_REPOSITORY)
        self.triton.start()
        seconds = warm_triton(self.triton.http_url, self.params)
        log(f"Triton's callees warmed up at every batch size in {seconds:.0f} s")

    def rounds(
        self, kinds: dict[str, Callable[[], dict[str, Any]]], rounds: int, label: str
    ) -> dict[str, list[dict[str, Any]]]:
        """``rounds`` rounds of every kind, the order rotated each round."""
        names = list(kinds)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                result = kinds[name]()
                result["round"] = r
                runs[name].append(result)
                log(
                    f"{label} round {r + 1}/{rounds} {name}: {result['frames']} frames, "
                    f"{result['frames_per_s']:.2f} frames/s"
                    + (f" PROBLEMS {result['problems']}" if result.get("problems") else "")
                )
        return runs

    def phase_one_camera(self) -> None:
        plan = self.plan
        warm_s = plan.warm_clip_s
        warm = trim_clip(self.source, warm_s, self.workdir / "warm.ts")
        log(f"warm-up: the service on a {warm_s:g} s clip (not counted)")
        warm_run = self.service([warm])
        self.raw["one_camera_warmup"] = warm_run
        # The bare loop and the seed client take about as long per frame as the service (the
        # models dominate); WARM_MARGIN covers the seed client being somewhat slower.
        n_kinds = 1 + self.want("P1") + self.want("P2")
        per_frame = n_kinds * WARM_MARGIN / max(warm_run["frames_per_s"], 1e-3)
        seconds = plan.fixed_clip_s or clip_seconds(plan.one_cam_budget_s, plan.rounds, per_frame)
        clip = trim_clip(self.source, seconds, self.workdir / "one-camera.ts")
        frames = count_frames(clip)
        log(f"one camera: {seconds:.2f} s clip, {frames} frames, {plan.rounds} rounds")
        kinds: dict[str, Callable[[], dict[str, Any]]] = {"service": lambda: self.service([clip])}
        if self.want("P1"):
            kinds["bare"] = lambda: self.bare(clip)
        if self.want("P2"):
            kinds["seed"] = lambda: self.seed([clip])
        runs = self.rounds(kinds, plan.rounds, "one camera")
        self.raw["one_camera"] = {"clip_s": seconds, "clip_frames": frames, "runs": runs}
        service = runs["service"]
        common = [
            f"{frames} frames of {self.source.name} (first {seconds:.2f} s, 1920x1080, "
            f"sample_fps {plan.sample_fps:g} = every frame), the same file for every run",
        ]
        if self.want("P1"):
            self.figures.append(
                Figure(
                    key="P1",
                    title="overhead: service vs bare in-process loop (1 camera)",
                    numerator="service frames/s",
                    denominator="bare loop frames/s",
                    unit="frames/s",
                    a=[r["frames_per_s"] for r in service],
                    b=[r["frames_per_s"] for r in runs["bare"]],
                    target=0.90,
                    higher_is_better=True,
                    notes=[
                        *common,
                        "service: Service(load_config(cfg), once=True) in-process, file camera "
                        "realtime: false, max_in_flight_per_camera 2, embedded Triton (started "
                        "once by the bench; instances x threads: "
                        f"{self.params.describe()}); "
                        "frames/s = frames answered / wall time of Service.run()",
                        f"bare loop: one process, PyAV decode + {self.params.input_hw[0]}x"
                        f"{self.params.input_hw[1]} letterbox + the three models "
                        f"({runs['bare'][0].get('runtime', 'torchscript')}, as the repository "
                        f"was built), {self.params.thread_budget} threads (the same "
                        "budget), "
                        f"torch {runs['bare'][0].get('torch', '?')} / numpy "
                        f"{runs['bare'][0].get('numpy', '?')} (the Triton models' environment)",
                        *_problems({k: runs[k] for k in ("service", "bare")}),
                    ],
                    extra={
                        "cpu_ms_per_frame": {
                            "service+triton": _median([r["cpu_ms_per_frame"] for r in service]),
                            "service process": _median(
                                [_per_frame(r["service_cpu_s"], r["frames"]) for r in service]
                            ),
                            "triton tree": _median(
                                [_per_frame(r["triton_cpu_s"], r["frames"]) for r in service]
                            ),
                            "bare loop": _median([r["cpu_ms_per_frame"] for r in runs["bare"]]),
                        },
                        "triton_cpu_ms_per_frame": _by_process(service),
                        "frames": {k: [r["frames"] for r in v] for k, v in runs.items()},
                        "plates": {k: [r["plates"] for r in v] for k, v in runs.items()},
                    },
                )
            )
        if self.want("P2"):
            notes = [*common, *_problems({k: runs[k] for k in ("service", "seed")})]
            self.figures.append(self._p2_figure("P2-1", 1, service, runs["seed"], notes))

    def _p2_figure(
        self,
        key: str,
        cameras: int,
        service: list[dict[str, Any]],
        seed: list[dict[str, Any]],
        common: list[str],
    ) -> Figure:
        stages: dict[str, list[float]] = {}
        for run in seed:
            for stage, ms in run["stage_ms_per_frame"].items():
                stages.setdefault(stage, []).append(ms)
        return Figure(
            key=key,
            title=f"service vs seed-style client, {cameras} camera{'s' if cameras > 1 else ''}",
            numerator="service frames/s",
            denominator="seed client frames/s",
            unit="frames/s",
            a=[r["frames_per_s"] for r in service],
            b=[r["frames_per_s"] for r in seed],
            target=1.0,
            higher_is_better=True,
            notes=[
                *common,
                "seed client: the seed's plate_recognition was not decoupled; ours is, so the "
                "sync HTTP client cannot call it. Emulated: per frame, synchronous "
                "tritonclient.http infer to detector, then stn and lprnet of the same Triton, "
                "pre/post-processing in the client (plate_ops), outputs as JSON "
                f"(binary_data=False); {seed[0].get('in_flight') if seed else '?'} requests "
                f"in flight in all, so that every instance ({self.params.describe()}) has work: "
                "each camera's decode thread hands its frames to worker threads of its own, "
                "each with its own synchronous client (bench/seed_client.py's seed_workers; "
                "the seed itself kept one per camera, which leaves an instance idle)",
                "GPU target (>= 3x, batching across cameras) is measured by bench/gpu/, not here",
            ],
            extra={
                "seed_stage_ms_per_frame": {k: _median(v) for k, v in stages.items()},
                "cpu_ms_per_frame": {
                    "service: service process": _median(
                        [_per_frame(r["service_cpu_s"], r["frames"]) for r in service]
                    ),
                    "service: triton tree": _median(
                        [_per_frame(r["triton_cpu_s"], r["frames"]) for r in service]
                    ),
                    "seed: client process": _median(
                        [_per_frame(r["client_cpu_s"], r["frames"]) for r in seed]
                    ),
                    "seed: triton tree": _median(
                        [_per_frame(r["triton_cpu_s"], r["frames"]) for r in seed]
                    ),
                },
                "triton_cpu_ms_per_frame": {
                    side: _by_process(runs) for side, runs in (("service", service), ("seed", seed))
                },
                "detector_threads": self.params.torch_threads.get("detector", 1),
                "detector_instances": self.params.instances.get("detector", 1),
                "seed_in_flight": [r.get("in_flight") for r in seed],
                "frames": {
                    "service": [r["frames"] for r in service],
                    "seed": [r["frames"] for r in seed],
                },
                "plates": {
                    "service": [r["plates"] for r in service],
                    "seed": [r["plates"] for r in seed],
                },
            },
        )

    def phase_four_cameras(self) -> None:
        plan = self.plan
        warm = self.workdir / "warm.ts"
        if not warm.exists():
            trim_clip(self.source, plan.warm_clip_s, warm)
        # Detector batches of 2-4 frames are new shapes for TorchScript: warm them up too.
        log(f"warm-up: the service with 4 cameras on a {plan.warm_clip_s:g} s clip (not counted)")
        warm_run = self.service([warm] * 4)
        self.raw["four_camera_warmup"] = warm_run
        per_frame = 2 * 4 * WARM_MARGIN / max(warm_run["frames_per_s"], 1e-3)
        seconds = plan.four_clip_s or clip_seconds(plan.four_cam_budget_s, plan.rounds, per_frame)
        clip = trim_clip(self.source, seconds, self.workdir / "four-camera.ts")
        frames = count_frames(clip)
        log(f"four cameras: {seconds:.2f} s clip, {frames} frames each, {plan.rounds} rounds")
        runs = self.rounds(
            {"service": lambda: self.service([clip] * 4), "seed": lambda: self.seed([clip] * 4)},
            plan.rounds,
            "four cameras",
        )
        self.raw["four_cameras"] = {"clip_s": seconds, "clip_frames": frames, "runs": runs}
        common = [
            f"4 cameras, each {frames} frames of {self.source.name} (first {seconds:.2f} s, "
            f"sample_fps {plan.sample_fps:g}); frames/s summed over the cameras",
        ]
        notes = [*common, *_problems(runs)]
        self.figures.append(self._p2_figure("P2-4", 4, runs["service"], runs["seed"], notes))

    def phase_regions(self) -> None:
        from bench import regions

        copies = 1 if self.plan.quick else 3
        args = argparse.Namespace(
            rounds=self.plan.rounds,
            cameras=2,
            copies=copies,
            kinds=list(regions.KINDS),
            workdir=self.workdir / "regions",
        )
        result = regions.measure(args)
        self.raw["regions"] = result
        command = f"python -m bench.regions --rounds {args.rounds} --copies {copies}"
        for kind in regions.KINDS:
            self.figures.append(regions.figure(result, command, kind))

    def phase_transport(self) -> None:
        choice = transport_choice()
        if choice is None:  # the service's own two paths (bench/transport.py)
            from bench import transport

            frames = 12 if self.plan.quick else 60
            options = {"rounds": self.plan.transport_rounds, "frames": frames}
            args = argparse.Namespace(**options, step=2, cameras=4)
            result = asyncio.run(transport.measure(args))
            self.raw["transport"] = result
            command = f"python -m bench.transport --rounds {args.rounds} --frames {frames}"
            self.figures.append(transport.figure(result, command))
            return
        name, default, choices = choice
        clip = self.workdir / "four-camera.ts"
        if not clip.exists():
            trim_clip(self.source, 1.0 if self.plan.quick else 2.0, clip)
        for value in choices:
            if value == default:
                continue
            runs = self.rounds(
                {
                    str(default): lambda: self.service([clip], {name: default}),
                    str(value): lambda v=value: self.service([clip], {name: v}),
                },
                self.plan.transport_rounds,
                f"transport {value}",
            )
            self.raw.setdefault("transport", {})[str(value)] = runs
            self.figures.append(
                Figure(
                    key=f"T-{value}",
                    title=f"transport {name}={value} vs {default} (1 camera)",
                    numerator=f"{value} frames/s",
                    denominator=f"{default} frames/s",
                    unit="frames/s",
                    a=[r["frames_per_s"] for r in runs[str(value)]],
                    b=[r["frames_per_s"] for r in runs[str(default)]],
                    target=None,
                    higher_is_better=True,
                    notes=[f"triton.{name} set per run; otherwise as P1's service"],
                )
            )

    def phase_p3(self) -> None:
        from bench.ingest_cost import ffmpeg_null, worker

        plan = self.plan
        clip = loop_clip(self.source, plan.p3_copies, self.workdir / "p3.ts")
        frames = count_frames(clip)
        log(f"P3: {plan.p3_copies} play(s) of the clip, {frames} frames, {plan.p3_rounds} rounds")
        runs = self.rounds(
            {
                "ingest": lambda: _frames_alias(worker(clip, "ingest", plan.p3_sample_fps)),
                "ffmpeg": lambda: _frames_alias(ffmpeg_null(clip, frames)),
                "decode": lambda: _frames_alias(worker(clip, "decode", plan.p3_sample_fps)),
                "decode_bgr": lambda: _frames_alias(worker(clip, "decode_bgr", plan.p3_sample_fps)),
            },
            plan.p3_rounds,
            "P3",
        )
        self.raw["p3"] = {"clip_frames": frames, "copies": plan.p3_copies, "runs": runs}
        cores = {k: _median([r["cores_used"] for r in v]) for k, v in runs.items()}
        common = [
            f"{frames} decoded 1920x1080 H.264 frames ({plan.p3_copies} play(s) of "
            f"{self.source.name}, stream-copied back to back); CPU = user + system over all "
            "threads; neither side pinned to one thread (cores used, CPU s / wall s: "
            + ", ".join(f"{k} {v:.2f}" for k, v in cores.items())
            + ")",
        ]
        ffmpeg_ms = [r["cpu_ms_per_frame"] for r in runs["ffmpeg"]]
        self.figures.append(
            Figure(
                key="P3",
                title="ingest CPU per decoded frame vs ffmpeg -f null",
                numerator="ingest CPU ms/frame",
                denominator="ffmpeg CPU ms/frame",
                unit="ms/frame",
                a=[r["cpu_ms_per_frame"] for r in runs["ingest"]],
                b=ffmpeg_ms,
                target=1.2,
                higher_is_better=False,
                notes=[
                    *common,
                    f"ingest: streamer.ingest.source.CameraSource, realtime false, sample_fps "
                    f"{plan.p3_sample_fps:g} (BGR conversion of the kept frames only), "
                    "FrameQueue(2, 'wait') drained by an asyncio consumer; one process per "
                    "run, getrusage around the decode",
                    "ffmpeg: `ffmpeg -hide_banner -loglevel error -i FILE -f null -` (Debian), "
                    "CPU of the whole process from wait4",
                ],
                extra={"cores_used": cores},
            )
        )
        for key, what in (
            ("decode", "PyAV decode only (no conversion)"),
            ("decode_bgr", "PyAV decode + to_ndarray('bgr24') on every frame"),
        ):
            self.figures.append(
                Figure(
                    key=f"P3-{key}",
                    title=f"for comparison: {what} vs ffmpeg",
                    numerator=f"{key} CPU ms/frame",
                    denominator="ffmpeg CPU ms/frame",
                    unit="ms/frame",
                    a=[r["cpu_ms_per_frame"] for r in runs[key]],
                    b=ffmpeg_ms,
                    target=None,
                    higher_is_better=False,
                    notes=["same file, same rounds as P3"],
                )
            )

    def soak_minutes(self) -> tuple[float, str | None]:
        """The planned soak, shortened if the run would otherwise overrun its budget."""
        planned = self.plan.soak_minutes
        if self.plan.budget_s is None:
            return planned, None
        left = self.plan.budget_s - (time.perf_counter() - self.started) - SOAK_RESERVE_S
        if left >= planned * 60:
            return planned, None
        minutes = max(1.0, left / 60)
        return minutes, (
            f"shortened from {planned:g} to {minutes:.1f} min so that the run stays within "
            f"{self.plan.budget_s / 60:g} min (the earlier phases took longer than planned)"
        )

    def phase_p4(self) -> None:
        from bench.soak import SOAK_CAMERAS, SOAK_SAMPLE_FPS, run_soak

        if "four_camera_warmup" not in self.raw:  # P4 alone: warm up Triton's batch shapes
            warm = trim_clip(self.source, self.plan.warm_clip_s, self.workdir / "warm.ts")
            log("warm-up: the service with 4 cameras (not counted)")
            self.raw["four_camera_warmup"] = self.service([warm] * SOAK_CAMERAS)
        plot = self.args.plot or default_plot(self.args)
        minutes, shortened = self.soak_minutes()
        if shortened:
            log(f"P4 soak {shortened}")
        result = run_soak(
            self.source,
            self.triton.grpc_url,
            self.triton.pid,
            minutes,
            self.workdir / "soak",
            plot,
            trace_allocations=self.args.soak_tracemalloc,
        )
        result["shortened"] = shortened
        self.raw["p4"] = result
        notes = [
            f"{SOAK_CAMERAS} file cameras looping the whole clip in real time (realtime: true, "
            f"drop-oldest queue like live cameras) at sample_fps {SOAK_SAMPLE_FPS:g} (the demo's), "
            f"dedup_window_s 0; the service in its own process, {minutes:.1f} min"
            + (f" ({shortened})" if shortened else ""),
            f"growth = median RSS of the last 10 % / median RSS of the 10-20 % window; "
            f"{len(result['rss_mib'])} samples every {result['interval_s']:.1f} s; plot: "
            f"{_rel(plot)}",
            f"answered {result['frames']} frames ({result['frames_per_s']:.2f} frames/s), "
            f"dropped {result['dropped_backpressure']} (inference behind), failed "
            f"{result['failed']} (deadline {self.triton_timeout_s():g} s), "
            f"{len(result['event_latency_s'])} events while running "
            f"(+{result['flushed_at_stop']} flushed at the stop, not counted)",
            "Triton tree RSS (server + stubs, summed): baseline "
            f"{_median(result['triton_rss_baseline_mib']):.0f} MiB, end "
            f"{_median(result['triton_rss_end_mib']):.0f} MiB",
            "trend over the second half (least-squares slope, a leak's signature; a one-off "
            f"step is not): service {result['rss_slope_mib_per_min']:+.1f} MiB/min, Triton "
            f"tree {result['triton_rss_slope_mib_per_min']:+.1f} MiB/min",
        ]
        self.figures.append(
            Figure(
                key="P4",
                title=f"soak, {SOAK_CAMERAS} cameras: service RSS end / baseline",
                numerator="RSS, last 10 % (MiB)",
                denominator="RSS, 10-20 % (MiB)",
                unit="MiB",
                a=list(result["rss_end_mib"]),
                b=list(result["rss_baseline_mib"]),
                target=1.05,
                higher_is_better=False,
                notes=notes,
                extra={
                    "plot": _rel(plot),
                    **(
                        {"tracemalloc_growth": result["tracemalloc_growth"]}
                        if "tracemalloc_growth" in result
                        else {}
                    ),
                },
            )
        )
        self.figures.append(
            Figure(
                key="P4-triton",
                title=f"soak, {SOAK_CAMERAS} cameras: Triton tree RSS end / baseline",
                numerator="RSS, last 10 % (MiB)",
                denominator="RSS, 10-20 % (MiB)",
                unit="MiB",
                a=list(result["triton_rss_end_mib"]),
                b=list(result["triton_rss_baseline_mib"]),
                target=None,
                higher_is_better=False,
                notes=[
                    "tritonserver and its model stubs (the detector's torch, the BLS), RSS "
                    "summed; same windows as P4; for information: the target is the service's",
                    "by process, end / baseline and slope over the second half: "
                    + _by_process_growth(result),
                ],
                extra={
                    "slope_mib_per_min": result.get("triton_rss_slope_by_process_mib_per_min", {}),
                    "minutes": minutes,
                },
            )
        )
        latencies = result["event_latency_s"]
        self.figures.append(
            Figure(
                key="P4-latency",
                title="soak: frame-to-event latency (s)",
                numerator="frame-to-event latency (s)",
                denominator="-",
                unit="s",
                a=list(latencies),
                b=[],
                target=None,
                higher_is_better=False,
                notes=[
                    "from decoding the first frame of a vehicle pass to its event "
                    "(the metric lpr_frame_to_event_latency_seconds), every event of the soak",
                    *_latency_by_reason(latencies, result.get("event_reasons", [])),
                    *(
                        [
                            "mean time from sending a frame to Triton to its answer "
                            f"(lpr_inference_latency_seconds): {inference:.2f} s"
                        ]
                        if (inference := result.get("inference_latency_mean_s"))
                        else []
                    ),
                    f"the cameras ask for {SOAK_CAMERAS} x {SOAK_SAMPLE_FPS:g} frames/s and "
                    f"Triton answers {result['frames_per_s']:.2f}: each camera's queue drops "
                    "the oldest frame, so a pass has few reads and waits for the vote's "
                    "max_delay_s or the end of its track more often than with fewer cameras",
                ],
                extra={
                    "p50_s": result["latency_p50_s"],
                    "p99_s": result["latency_p99_s"],
                    "events": len(latencies),
                },
            )
        )


def _frames_alias(result: dict[str, Any]) -> dict[str, Any]:
    result["frames"] = result["decoded"]
    result["frames_per_s"] = result["decode_fps"]
    return result


def _by_process_growth(result: dict[str, Any]) -> str:
    """``stub:detector 1.01 (+0.3 MiB/min), ...`` for each of Triton's processes."""
    from bench.soak import BASELINE_WINDOW, END_WINDOW, window

    parts = []
    span = result["run_s"]
    slopes = result.get("triton_rss_slope_by_process_mib_per_min", {})
    for label, series in result.get("triton_rss_by_process_mib", {}).items():
        base, end = window(series, BASELINE_WINDOW, span), window(series, END_WINDOW, span)
        if base and end:
            ratio = statistics.median(end) / statistics.median(base)
            parts.append(
                f"{label} {statistics.median(end):.0f} MiB, {ratio:.2f} "
                f"({slopes.get(label, float('nan')):+.1f} MiB/min)"
            )
    return "; ".join(parts) or "-"


def _latency_by_reason(latencies: list[float], reasons: list[str]) -> list[str]:
    """One note: events per reason for reporting, with the median latency of each."""
    if len(reasons) != len(latencies) or not reasons:
        return []
    by_reason: dict[str, list[float]] = {}
    for latency, reason in zip(latencies, reasons, strict=True):
        by_reason.setdefault(reason, []).append(latency)
    parts = [
        f"{reason} {len(values)} (p50 {percentile(values, 50):.1f} s)"
        for reason, values in sorted(by_reason.items(), key=lambda kv: -len(kv[1]))
    ]
    return [
        "events by why they were reported: "
        + ", ".join(parts)
        + " (flush: the looping clip restarted, its time went backwards, which ends every track)"
    ]


def default_plot(args: argparse.Namespace) -> Path:
    """The P4 plot goes next to the document it illustrates (committed with it), else to results."""
    if args.no_doc:
        return RESULTS_DIR / f"{args.stamp}-soak-rss.png"
    return args.doc.with_name(f"{args.doc.stem}-soak-rss.png")


def publish_raw(source: Path, doc: Path) -> str:
    """Put the raw results behind ``doc`` next to it (``docs/PERFORMANCE.json``): a reader of
    the committed table can check every figure against every run and sample."""
    target = doc.with_suffix(".json")
    if source.resolve() != target.resolve():
        shutil.copyfile(source, target)
    return target.name


def _problems(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Notes for runs that did not do all their work (failed frames, camera errors)."""
    return [
        f"PROBLEM in {kind} round {run['round'] + 1}: {'; '.join(run['problems'])}"
        for kind, kind_runs in runs.items()
        for run in kind_runs
        if run.get("problems")
    ]


def _by_process(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Median CPU ms per frame of each Triton process (``stub:detector``, ...) over ``runs``."""
    labels = sorted({label for r in runs for label in r.get("triton_cpu_by_process_s", {})})
    return {
        label: _median(
            [_per_frame(r["triton_cpu_by_process_s"].get(label, 0.0), r["frames"]) for r in runs]
        )
        for label in labels
    }


def _per_frame(seconds: float, frames: int) -> float:
    return 1e3 * seconds / frames if frames else 0.0


def _median(values: list[float]) -> float:
    clean = [v for v in values if v is not None]
    return statistics.median(clean) if clean else float("nan")


def _rel(path: Path) -> str:
    try:
        return str(path.absolute().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


#: The side of a figure to profile when its target is missed (``python -m bench.profile``).
PROFILE_TARGETS: dict[str, tuple[str, ...]] = {
    "P1": ("service",),
    "P2-1": ("service",),
    "P2-4": ("service", "--cameras", "4"),
    "P3": ("ingest",),
}


def profile_misses(figures: list[Figure], quick: bool) -> None:
    """py-spy profile of the slower side of every missed figure; summary into its extra."""
    from bench.report_capacity import profile_target

    done: dict[tuple[str, ...], str] = {}
    for figure in figures:
        target = PROFILE_TARGETS.get(figure.key) or profile_target(figure, quick)
        if figure.verdict != "MISS" or target is None:
            continue
        if target not in done:
            log(f"profiling {' '.join(target)} for {figure.key} (py-spy)")
            command = [sys.executable, "-m", "bench.profile", *target]
            if "--seconds" not in target:
                command += ["--seconds", "1" if quick else "3"]
            code, _, _, out = run_with_rusage(command)
            done[target] = out if code == 0 else f"profile failed (exit {code})"
        figure.extra["profile"] = done[target]
        figure.extra["profile_command"] = "python -m bench.profile " + " ".join(target)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny runs, a few minutes")
    parser.add_argument(
        "--only",
        type=lambda s: [p.strip().upper() for p in s.split(",") if p.strip()],
        default=list(PHASES),
        help=f"comma-separated phases of {','.join(PHASES)} (default: all)",
    )
    parser.add_argument("--soak-minutes", type=float, help="P4 length (default 10; --quick 0.5)")
    parser.add_argument("--rounds", type=int, help="rounds for P1/P2 (default 3)")
    parser.add_argument(
        "--ladder",
        type=lambda s: [int(n) for n in s.split(",") if n.strip()],
        help="O: cameras per step, comma-separated (default 1,2,4,8,16; --quick 1,2)",
    )
    parser.add_argument(
        "--mix-cameras",
        type=int,
        help="C: cameras (default: sized from O's saturated rate, else 2 per core)",
    )
    parser.add_argument(
        "--budget-minutes",
        type=float,
        help="whole-run budget the soak is shortened to fit (default 50; --quick or 0: none)",
    )
    parser.add_argument("--doc", type=Path, default=DOC, help="the table (default %(default)s)")
    parser.add_argument("--no-doc", action="store_true", help="write the JSON only")
    parser.add_argument("--json", type=Path, help="raw results (default bench/results/STAMP.json)")
    parser.add_argument(
        "--plot", type=Path, help="P4 RSS plot (default: next to --doc, DOC-soak-rss.png)"
    )
    parser.add_argument("--keep-workdir", action="store_true", help="keep clips and configs")
    parser.add_argument(
        "--render", type=Path, metavar="JSON", help="only write --doc again from a results JSON"
    )
    parser.add_argument(
        "--merge",
        type=Path,
        metavar="JSON",
        help="with --render: put the phases of this later run (--only ...) in first",
    )
    parser.add_argument(
        "--soak-tracemalloc",
        action="store_true",
        help="P4: trace the service's Python allocations (slower; for finding a leak)",
    )
    parser.add_argument(
        "--profile-misses",
        action="store_true",
        help="after the suite, py-spy profile the slower side of each missed target (~1 min "
        "each) and put the summary in the document",
    )
    args = parser.parse_args(argv)
    unknown = set(args.only) - set(PHASES)
    if unknown:
        parser.error(f"unknown phase(s) {sorted(unknown)}; choose from {','.join(PHASES)}")
    if args.ladder is not None and (not args.ladder or min(args.ladder) < 1):
        parser.error("--ladder: one or more camera counts >= 1, e.g. 1,2,4")
    if args.mix_cameras is not None and args.mix_cameras < 0:
        parser.error("--mix-cameras: a count >= 1 (0: sized from the saturated rate)")
    return args


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def render(path: Path, doc: Path, merge_from: Path | None = None) -> int:
    """Write ``doc`` again from a results JSON, measuring nothing; with ``merge_from``, the
    phases of that later run first replace the same phases' (bench/merge_results.py), and
    ``path`` is rewritten with them."""
    data = json.loads(path.read_text())
    if merge_from is not None:
        data = merge_results.merge(data, json.loads(merge_from.read_text()))
        path.write_text(json.dumps(data, indent=2) + "\n")
    figures = [Figure.from_dict(f) for f in data["figures"]]
    soak = data.get("raw", {}).get("p4", {})
    for figure in figures:  # results written before the slopes were kept with the figure
        if figure.key == "P4-triton" and "slope_mib_per_min" not in figure.extra and soak:
            figure.extra["slope_mib_per_min"] = soak.get("triton_rss_slope_by_process_mib_per_min")
            figure.extra["minutes"] = soak.get("minutes")
    meta = data["meta"]
    meta["json"] = publish_raw(path, doc)
    meta["doc"] = _rel(doc)
    table = report.table(figures)
    print(table)
    doc.write_text(report.document(meta, figures, table))
    log(f"wrote {_rel(doc)} from {_rel(path)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render is not None:
        return render(args.render, args.doc, args.merge)
    # `timeout` and CI send SIGTERM: unwind, so that Triton and the workers are stopped.
    signal.signal(signal.SIGTERM, _terminate)
    args.stamp = time.strftime("%Y%m%d-%H%M%S")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    plan = make_plan(args)
    if not (MODEL_REPOSITORY / "build_info.json").is_file():
        print("model_repository/ is not built: run `make models`", file=sys.stderr)
        return 2
    shown_argv = ["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)]
    meta = run_meta(shown_argv)
    meta["plan"] = asdict(plan)
    meta["full_plan"] = asdict(make_plan(parse_args([])))
    meta["phases"] = args.only
    meta["doc"] = _rel(args.doc)
    log(f"plan: {asdict(plan)}; phases {args.only}")
    workdir = Path(tempfile.mkdtemp(prefix="lpr-bench-"))
    started = time.perf_counter()
    suite = Suite(args, plan, workdir)
    meta["pipeline"] = suite.params.as_dict()
    error: str | None = None
    try:
        suite.run()
    except (Exception, KeyboardInterrupt, SystemExit) as exc:  # keep what was measured
        error = f"{type(exc).__name__}: {exc}"
        logging.exception("bench failed")
    finally:
        if not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.profile_misses and error is None:
        profile_misses(suite.figures, plan.quick)
    meta["total_s"] = round(time.perf_counter() - started, 1)
    meta["phase_s"] = suite.timings
    meta["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    meta["error"] = error
    json_path = args.json or RESULTS_DIR / f"{args.stamp}.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "meta": meta,
        "figures": [f.as_dict() for f in suite.figures],
        "raw": suite.raw,
    }
    json_path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    table = report.table(suite.figures)
    print(table)
    if error is not None:
        log(f"not writing {_rel(args.doc)}: the run did not complete ({error})")
    elif not args.no_doc:
        meta["json"] = publish_raw(json_path, args.doc)
        args.doc.write_text(report.document(meta, suite.figures, table))
        log(f"wrote {_rel(args.doc)} and {meta['json']} next to it")
    log(f"raw results: {_rel(json_path)}; total {meta['total_s']:.0f} s")
    summary = {f.key: f.verdict for f in suite.figures}
    log(f"verdicts: {summary}")
    return 1 if error else 0
