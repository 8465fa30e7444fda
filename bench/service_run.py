"""The service as the benchmarks run it: ``streamer.app.Service`` on file cameras.

In-process (:func:`run_service`, P1/P2): ``Service(load_config(cfg), once=True)`` plays every
file camera once as fast as possible (``realtime: false``: the decode thread waits for the
pipeline, nothing is dropped) against a running Triton (``triton.url``); frames/s is frames
answered over the wall time of ``Service.run()`` (connect, play, drain, shut down).

As a worker process (P4, the soak)::

    python -m bench.service_run --config CFG --duration S --json OUT [--tracemalloc]

runs ``Service(..., once=False)`` (files loop) for ``S`` seconds, then stops it as SIGTERM
would, and writes the pipeline counters, its start and stop times (``time.monotonic()``, the
same clock in every process) and the frame-to-event latency of every event published before
the stop to ``OUT``. With ``--sample-every T [--triton-pid PID]`` (the capacity phases,
bench/capacity.py) it also keeps a timeline: every ``T`` seconds each camera's counters, the
in-flight window, the recognizer's stats, its own RSS and CPU and those of Triton's process
tree; every answer's time at Triton (``PlateRecognizer.latency_observers``), every answer's
time from capture to answer (``captures``: from the frame's decode, ``Frame.monotonic``, to its
result reaching the camera's tracker, the service's ``on_result`` hook: queueing, the wait for
a permit, Triton and the in-order hand-over included) and every event's camera and text, each
with its ``time.monotonic()``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import sys
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench.common import cpu_delta, self_cpu_s, tree_cpu_by_label, tree_rss_by_label
from streamer.app import Service
from streamer.config import CameraConfig, Settings, load_config
from streamer.delivery.events import PlateEvent
from streamer.domain.frames import FrameResult
from streamer.foundation.allocator import tune_allocator

SERVICE_LOG_LEVEL = logging.WARNING
TRACEMALLOC_FRAMES = 8
TRACEMALLOC_TOP = 15


class RecordingSink:
    """An event sink that keeps each pass's frame-to-event latency (as the metric does: its
    first report) and its text at its highest version (a correction replaces it: the rule of
    ``streamer.cli.replay.latest_versions``). Only what it reports is kept, never the events
    themselves: it runs inside the service whose memory the soak measures."""

    name = "bench-recorder"
    healthy = True

    def __init__(self) -> None:
        self.latencies_s: list[float] = []
        self.published_at: list[float] = []  # time.monotonic() of each pass's first report
        self.texts: list[str] = []
        self.cameras: list[str] = []
        self.reasons: list[str] = []  # why each pass was reported (confident, max_delay, ...)
        self.corrections = 0
        self._passes: dict[str, tuple[int, int]] = {}  # event_id -> (position, version)

    async def publish(self, event: PlateEvent) -> None:
        known = self._passes.get(event.event_id)
        if known is not None:  # a correction: the pass now reads its newest text
            self.corrections += 1
            position, version = known
            if event.version > version:
                self.texts[position] = event.text
                self._passes[event.event_id] = (position, event.version)
            return
        now = time.monotonic()
        self._passes[event.event_id] = (len(self.texts), event.version)
        self.latencies_s.append(now - event.first_seen_monotonic)
        self.published_at.append(now)
        self.texts.append(event.text)
        self.cameras.append(event.camera)
        self.reasons.append(event.reason)

    async def close(self) -> None:
        return None


@dataclass
class ServiceSpec:
    """What one service run reads and how."""

    clips: list[Path]
    triton_url: str
    sample_fps: float
    realtime: bool = False
    triton_extra: dict[str, Any] = field(default_factory=dict)
    events_extra: dict[str, Any] = field(default_factory=dict)
    #: Merged into every camera; the motion gate is off unless this turns it on, so that every
    #: sampled frame is inferred (the phases compare equal work; phase M and C gate).
    camera_extra: dict[str, Any] = field(default_factory=dict)


def _switched_off(section: str) -> dict[str, Any] | None:
    """Settings that keep a server section of the config from listening, if it has one."""
    info = Settings.model_fields.get(section)
    fields = getattr(info.annotation, "model_fields", {}) if info is not None else {}
    if "enabled" in fields:
        return {"enabled": False}
    if "port" in fields:
        return {"port": 0}
    return None


def _gate_off() -> dict[str, Any]:
    """``{"motion": {"enabled": False, "regions": False}}`` where cameras have a motion gate
    (on by default): every sampled frame sent and detected whole, the same work in every
    phase; phase D (bench/regions.py) measures the regions."""
    if "motion" not in CameraConfig.model_fields:
        return {}
    motion = CameraConfig.model_fields["motion"].annotation
    fields = getattr(motion, "model_fields", {})
    return {"motion": {"enabled": False, **({"regions": False} if "regions" in fields else {})}}


def worker_command(config: Path, duration_s: float, out: Path, *options: str) -> list[str]:
    """The command line of one worker run of this module (``options`` appended)."""
    return [
        sys.executable,
        "-m",
        "bench.service_run",
        "--config",
        str(config),
        "--duration",
        f"{duration_s:g}",
        "--json",
        str(out),
        *options,
    ]


def write_config(spec: ServiceSpec, folder: Path) -> Path:
    """A service config for ``spec`` in ``folder`` (events to a file there, no ports opened)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "cameras": [
            {
                "name": f"cam{i}",
                "url": str(clip.absolute()),
                "sample_fps": spec.sample_fps,
                "realtime": spec.realtime,
                **_gate_off(),
                **spec.camera_extra,
            }
            for i, clip in enumerate(spec.clips)
        ],
        "triton": {"url": spec.triton_url, **spec.triton_extra},
        "events": {"stdout": False, "file": str(folder / "events.jsonl"), **spec.events_extra},
        "log": {"level": logging.getLevelName(SERVICE_LOG_LEVEL)},
    }
    for section in ("metrics", "web"):  # no listening ports: nothing to collide with
        off = _switched_off(section)
        if off is not None:
            config[section] = off
    path = folder / "service.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _counters(service: Service) -> dict[str, Any]:
    cams = service.cameras.values()
    return {
        "frames": sum(c.pipeline.stats.answered for c in cams),
        "sent": sum(c.pipeline.stats.sent for c in cams),
        "failed": sum(c.pipeline.stats.failed for c in cams),
        "decoded": sum(c.source.stats.decoded for c in cams),
        "sampled": sum(c.source.stats.sampled for c in cams),
        "dropped_backpressure": sum(c.queue.dropped for c in cams),
        "plates": sum(c.pipeline.stats.plates for c in cams),
        "skipped_no_motion": sum(c.source.stats.skipped_no_motion for c in cams),
        "events": service.events_emitted,
        "inference_latency_mean_s": _histogram_mean(service, "lpr_inference_latency_seconds"),
        "camera_errors": [c.source.stats.last_error for c in cams if c.source.stats.last_error],
    }


def _histogram_mean(service: Service, name: str) -> float | None:
    """Mean of a labelled histogram over all its label sets (sum / count), None when empty."""
    total = count = 0.0
    for metric in service.metrics.registry.collect():
        for sample in metric.samples:
            if sample.name == f"{name}_sum":
                total += sample.value
            elif sample.name == f"{name}_count":
                count += sample.value
    return total / count if count else None


async def _run(service: Service, duration_s: float | None) -> float | None:
    """``service.run()``; with ``duration_s``, stopped then. The stop's time.monotonic()."""
    stopped: list[float] = []

    def stop() -> None:
        stopped.append(time.monotonic())
        service.request_stop()

    if duration_s is not None:
        asyncio.get_running_loop().call_later(duration_s, stop)
    await service.run()
    return stopped[0] if stopped else None


def run_service(
    spec: ServiceSpec, folder: Path, triton_pid: int | None, duration_s: float | None = None
) -> dict[str, Any]:
    """One in-process run; frames/s, CPU of this process and of Triton, events' latency."""
    settings = load_config(write_config(spec, folder))
    logging.getLogger("streamer").setLevel(SERVICE_LOG_LEVEL)
    recorder = RecordingSink()

    async def main() -> dict[str, Any]:
        service = Service(settings, once=duration_s is None, extra_sinks=[recorder])
        cpu0, triton0 = self_cpu_s(), tree_cpu_by_label(triton_pid)
        started = time.perf_counter()
        await _run(service, duration_s)
        wall = time.perf_counter() - started
        counters = _counters(service)
        triton = cpu_delta(triton0, tree_cpu_by_label(triton_pid))
        return {
            **counters,
            "wall_s": wall,
            "frames_per_s": counters["frames"] / wall if wall > 0 else 0.0,
            "service_cpu_s": self_cpu_s() - cpu0,
            "triton_cpu_s": sum(triton.values()),
            "triton_cpu_by_process_s": triton,
            "event_latency_s": recorder.latencies_s,
            "distinct_texts": len(set(recorder.texts)),
            "corrections": recorder.corrections,
            "event_texts": list(zip(recorder.cameras, recorder.texts, strict=True)),
        }

    return asyncio.run(main())


# -- the timeline of a worker run (capacity phases) ------------------------------------------


def _per_camera(service: Service) -> dict[str, dict[str, int]]:
    """Each counter the capacity phases read, per camera."""
    out: dict[str, dict[str, int]] = {}
    for name, c in service.cameras.items():
        out[name] = {
            "answered": c.pipeline.stats.answered,
            "sent": c.pipeline.stats.sent,
            "failed": c.pipeline.stats.failed,
            "superseded": c.pipeline.stats.superseded,
            "decoded": c.source.stats.decoded,
            "sampled": c.source.stats.sampled,
            "skipped_no_motion": c.source.stats.skipped_no_motion,
            "dropped": c.queue.dropped,
        }
    return out


def _process_sample(triton_pid: int | None) -> dict[str, float]:
    """RSS (MiB) and CPU s of this process and of Triton's tree (run in a thread)."""
    me = psutil.Process()
    rss = tree_rss_by_label(triton_pid)
    return {
        "rss_mib": me.memory_info().rss / 2**20,
        "cpu_s": self_cpu_s(),
        "triton_rss_mib": sum(rss.values()) / 2**20,
        "triton_cpu_s": sum(tree_cpu_by_label(triton_pid).values()),
    }


async def _sample_timeline(
    service: Service, every_s: float, triton_pid: int | None, timeline: list[dict[str, Any]]
) -> None:
    """Append a sample to ``timeline`` every ``every_s`` seconds until cancelled."""
    while True:
        processes = await asyncio.to_thread(_process_sample, triton_pid)
        recognizer = service.recognizer
        timeline.append(
            {
                "t": time.monotonic(),
                **processes,
                "cameras": _per_camera(service),
                "window_limit": recognizer.window_limit if recognizer else None,
                "recognizer": dataclasses.asdict(recognizer.stats) if recognizer else {},
            }
        )
        await asyncio.sleep(every_s)


class CaptureClock:
    """The service's ``on_result`` hook: ``(time.monotonic(), seconds since the frame was
    decoded)`` of every answered frame, as its result reaches the camera's tracker."""

    def __init__(self) -> None:
        self.answers: list[tuple[float, float]] = []

    def __call__(self, result: FrameResult) -> None:
        now = time.monotonic()
        self.answers.append((now, now - result.frame.monotonic))


async def _observe_latency(service: Service, latencies: list[tuple[float, float]]) -> None:
    """Record every answer's time at Triton, once the service has made its recognizer.

    ``Service.run()`` makes it before the cameras start (there is nothing to wait on: poll).
    """
    while True:
        if service.recognizer is not None:
            break
        await asyncio.sleep(0.01)
    service.recognizer.latency_observers.append(
        lambda seconds: latencies.append((time.monotonic(), seconds))
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the service for a fixed time (P4 worker)")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--duration", type=float, required=True, help="seconds")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="compare Python allocations at 20 %% of the run with the end (slower)",
    )
    parser.add_argument(
        "--sample-every", type=float, default=0.0, help="timeline every S seconds (0: none)"
    )
    parser.add_argument("--triton-pid", type=int, help="Triton's pid, for its tree's RSS and CPU")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    settings = load_config(args.config)
    tune_allocator()  # as `streamer run` does: the memory figures are the product's
    recorder = RecordingSink()
    snapshots: list[tracemalloc.Snapshot] = []
    if args.tracemalloc:
        tracemalloc.start(TRACEMALLOC_FRAMES)
    timeline: list[dict[str, Any]] = []
    latencies: list[tuple[float, float]] = []
    captures = CaptureClock()

    async def run() -> dict[str, Any]:
        service = Service(
            settings,
            once=False,
            extra_sinks=[recorder],
            on_result=captures if args.sample_every > 0 else None,
        )
        started = time.monotonic()
        if args.tracemalloc:
            asyncio.get_running_loop().call_later(
                args.duration * 0.2, lambda: snapshots.append(tracemalloc.take_snapshot())
            )
        helpers = []
        if args.sample_every > 0:
            helpers = [
                asyncio.create_task(_observe_latency(service, latencies)),
                asyncio.create_task(
                    _sample_timeline(service, args.sample_every, args.triton_pid, timeline)
                ),
            ]
        try:
            stopped = await _run(service, args.duration)
        finally:
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
        if args.tracemalloc:  # after the stop: the tracks flushed, what stays is what leaks
            snapshots.append(tracemalloc.take_snapshot())
        return {
            **_counters(service),
            "wall_s": time.monotonic() - started,
            "started_monotonic": started,
            "stop_monotonic": stopped,
            "recognizer": dataclasses.asdict(service.recognizer.stats)
            if service.recognizer
            else {},
        }

    result = asyncio.run(run())
    # Events published after the stop are the shutdown's flush of open tracks (their
    # "latency" is how long the track was open): kept apart.
    stop = result["stop_monotonic"] or float("inf")
    pairs = list(zip(recorder.published_at, recorder.latencies_s, recorder.reasons, strict=True))
    result["event_latency_s"] = [lat for at, lat, _ in pairs if at <= stop]
    result["event_reasons"] = [reason for at, _, reason in pairs if at <= stop]
    result["flushed_at_stop"] = sum(1 for at, _, _ in pairs if at > stop)
    result["distinct_texts"] = len(set(recorder.texts))
    result["corrections"] = recorder.corrections
    if args.sample_every > 0:
        result["timeline"] = timeline
        result["latencies"] = latencies
        result["captures"] = captures.answers
        columns = (recorder.published_at, recorder.cameras, recorder.texts, recorder.reasons)
        result["event_log"] = list(zip(*columns, strict=True))
    if len(snapshots) == 2:
        growth = snapshots[1].compare_to(snapshots[0], "traceback")
        result["tracemalloc_growth"] = [
            {
                "size_diff_kib": stat.size_diff / 1024,
                "count_diff": stat.count_diff,
                "where": [f"{f.filename}:{f.lineno}" for f in stat.traceback],
            }
            for stat in growth[:TRACEMALLOC_TOP]
        ]
    args.json.write_text(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
