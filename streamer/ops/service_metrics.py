"""Metrics read at scrape time from the running parts: the counters kept by the decode
threads, pipelines, pass detectors, supervisor and inference client (``Metrics`` holds the
ones the code increments as it goes: streamer/foundation/metrics.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric

from streamer.foundation.build_info import UNKNOWN, ModelBuild, package_version
from streamer.foundation.metrics import counter, gauge

if TYPE_CHECKING:
    from streamer.foundation.shards import Shard
    from streamer.foundation.supervisor import Supervisor
    from streamer.inference.embedded.watchdog import TritonWatchdog
    from streamer.inference.endpoints import Endpoint
    from streamer.inference.pool import TritonPool
    from streamer.pipeline.cameras import Camera
    from streamer.pipeline.lease_gate import LeaseGate

_PER_CAMERA: dict[str, tuple[str, Callable[[Camera], float]]] = {
    "lpr_frames_decoded": ("Frames decoded.", lambda c: c.source.stats.decoded),
    "lpr_frames_sampled": (
        "Frames kept by sampling (converted and queued).",
        lambda c: c.source.stats.sampled,
    ),
    "lpr_frames_sent": ("Frames sent to Triton.", lambda c: c.pipeline.stats.sent),
    "lpr_frames_answered": (
        "Frames Triton answered in time.",
        lambda c: c.pipeline.stats.answered,
    ),
    "lpr_decode_errors": (
        "Damaged packets or frames skipped or concealed.",
        lambda c: c.source.stats.decode_errors,
    ),
    "lpr_camera_reconnects": (
        "Reconnect attempts after a lost or failed source.",
        lambda c: c.source.stats.reconnects,
    ),
}


def camera_metrics(cameras: Iterable[Camera], recognizer: TritonPool | None) -> list[Metric]:
    """Per camera: frames by stage, drops and skips by reason, tracks, passes withheld."""
    cameras = list(cameras)
    families: list[Metric] = []
    for name, (doc, value) in _PER_CAMERA.items():
        family = counter(name, doc, ["camera"])
        for camera in cameras:
            family.add_metric([camera.config.name], value(camera))
        families.append(family)
    dropped = counter(
        "lpr_frames_dropped",
        "Sampled frames not recognised, by reason: backpressure (inference behind: "
        "a waiting frame replaced by a newer one) or inference_failed.",
        ["camera", "reason"],
    )
    in_flight = gauge(
        "lpr_frames_in_flight",
        "Frames holding an inference permit now (waiting to be sent or at Triton).",
        ["camera"],
    )
    tracks = gauge("lpr_active_tracks", "Confirmed plate tracks now.", ["camera"])
    up = gauge("lpr_camera_up", "1 while the camera delivers frames.", ["camera"])
    withheld = counter(
        "lpr_passes_withheld",
        "Vehicle passes not reported, by reason: duplicate (the same text within "
        "events.dedup_window_s), low_confidence (under events.min_confidence) or few_reads "
        "(read exactly fewer than events.min_reads times).",
        ["camera", "reason"],
    )
    skipped = counter(
        "lpr_frames_skipped",
        "Sampled frames not sent on purpose, by reason: no_motion (the motion gate).",
        ["camera", "reason"],
    )
    for c in cameras:
        name, stats, passes = c.config.name, c.pipeline.stats, c.pipeline.passes
        dropped.add_metric([name, "backpressure"], c.queue.dropped + stats.superseded)
        dropped.add_metric([name, "inference_failed"], stats.failed)
        held = recognizer.held(name) if recognizer is not None else 0
        in_flight.add_metric([name], held)
        tracks.add_metric([name], passes.active_tracks)
        up.add_metric([name], 1.0 if c.source.stats.state == "connected" else 0.0)
        withheld.add_metric([name, "duplicate"], passes.suppressed)
        withheld.add_metric([name, "low_confidence"], passes.unsure)
        withheld.add_metric([name, "few_reads"], passes.few_reads)
        skipped.add_metric([name, "no_motion"], c.source.stats.skipped_no_motion)
    return [*families, dropped, in_flight, tracks, up, withheld, skipped]


def part_metrics(supervisor: Supervisor, watchdog: TritonWatchdog | None) -> list[Metric]:
    """Each supervised part's restarts and whether it runs."""
    restarts = counter(
        "lpr_part_restarts",
        "Restarts of a supervised part (camera-<name>, events, triton, ...) after it crashed "
        "or died.",
        ["part"],
    )
    running = gauge("lpr_part_running", "1 while a supervised part runs.", ["part"])
    for name, part in supervisor.parts.items():
        count, up = part.restarts, part.state == "running"
        if name == "triton" and watchdog is not None:  # it restarts the server itself
            count, up = watchdog.restarts, up and watchdog.state == "running"
        restarts.add_metric([name], count)
        running.add_metric([name], 1.0 if up else 0.0)
    return [restarts, running]


def inference_metrics(recognizer: TritonPool | None) -> list[Metric]:
    """The Triton streams and their windows: totals, and per endpoint."""
    ready = gauge("lpr_triton_ready", "1 while the stream to a Triton endpoint is open.", [])
    ready.add_metric([], 1.0 if recognizer is not None and recognizer.ready else 0.0)
    if recognizer is None:
        return [ready]
    stats = recognizer.stats
    window = gauge(
        "lpr_inference_window",
        "Frames allowed at Triton at once (adaptive windows, every endpoint's summed).",
        [],
    )
    window.add_metric([], recognizer.window_limit)
    held = gauge("lpr_inference_in_flight", "Inference permits held now (all cameras).", [])
    held.add_metric([], recognizer.in_flight)
    at_triton = gauge("lpr_inference_at_triton", "Frames written to Triton, unanswered.", [])
    at_triton.add_metric([], recognizer.at_triton)
    waiting = gauge("lpr_inference_waiting_cameras", "Cameras waiting for a permit.", [])
    waiting.add_metric([], recognizer.waiting)
    no_load = gauge(
        "lpr_inference_no_load_latency_seconds",
        "Minimum latency of recent answers: the windows' reference (the lowest endpoint's).",
        [],
    )
    latencies = [e.client.scheduler.window.no_load_latency_s for e in recognizer.endpoints.values()]
    no_load.add_metric([], min((x for x in latencies if x), default=0.0))
    late = counter(
        "lpr_inference_late_answers",
        "Answers that came after their frame's deadline (discarded).",
        [],
    )
    late.add_metric([], stats.late)
    resets = counter(
        "lpr_inference_stream_resets",
        "Streams reset because Triton held a frame long past its deadline.",
        [],
    )
    resets.add_metric([], stats.resets)
    return [
        ready,
        window,
        held,
        at_triton,
        waiting,
        no_load,
        late,
        resets,
        *endpoint_metrics(recognizer),
    ]


def endpoint_metrics(pool: TritonPool) -> list[Metric]:
    """Per Triton endpoint: health, cameras, window; and the cameras moved between them."""
    labels = ["endpoint"]
    healthy = gauge(
        "lpr_triton_endpoint_healthy",
        "1 while the endpoint's stream is open, its readiness check passes and its model answers.",
        labels,
    )
    share = gauge(
        "lpr_triton_endpoint_share",
        "The endpoint's share of its fair part of the cameras (0 down, rising while it "
        "recovers, 1 serving).",
        labels,
    )
    cameras = gauge("lpr_triton_endpoint_cameras", "Cameras assigned to the endpoint.", labels)
    window = gauge("lpr_triton_endpoint_window", "The endpoint's adaptive window.", labels)
    failures = counter(
        "lpr_triton_endpoint_failures", "Times the endpoint was found unhealthy.", labels
    )
    now = time.monotonic()
    for url, endpoint in pool.endpoints.items():
        healthy.add_metric([url], 1.0 if endpoint.ok else 0.0)
        share.add_metric([url], endpoint.share.share(now))
        cameras.add_metric([url], len(pool.cameras_of(url)))
        window.add_metric([url], endpoint.client.scheduler.window.limit)
        failures.add_metric([url], endpoint.share.failures)
    moves = counter(
        "lpr_triton_camera_moves",
        "Cameras moved from one Triton endpoint to another, by reason: failover (it failed) "
        "or rebalance (one recovered or was added).",
        ["reason"],
    )
    for reason, count in pool.moves.items():
        moves.add_metric([reason], count)
    return [healthy, share, cameras, window, failures, moves]


def shard_metric(shard: Shard, cameras: Iterable[str]) -> Metric:
    """1 per camera this replica runs, labelled with its shard (I/N)."""
    family = gauge(
        "lpr_shard_camera",
        "1 for each camera this replica runs; shard: this replica, I/N (--shard).",
        ["shard", "camera"],
    )
    for camera in cameras:
        family.add_metric([str(shard), camera], 1)
    return family


def lease_metrics(gate: LeaseGate) -> list[Metric]:
    """Per camera of this replica: waiting for its lease (1), run on another replica too (1)."""
    waiting = gauge(
        "lpr_camera_lease_waiting",
        "1 for each camera of this replica that waits for its lease (another replica holds "
        "it, or the database is unreachable).",
        ["camera"],
    )
    for camera in sorted(gate.waiting):
        waiting.add_metric([camera], 1)
    double = gauge(
        "lpr_camera_double_run",
        "1 for each camera this replica runs that another replica was seen running too.",
        ["camera"],
    )
    for camera in sorted(gate.doubles):
        double.add_metric([camera], 1)
    return [waiting, double]


#: The labels of ``lpr_build_info``, one series per Triton endpoint (docs/metrics.md).
BUILD_INFO_LABELS = [
    "endpoint",
    "version",
    "triton_version",
    "model_built_at",
    "model_runtime",
    "model_precision",
    "detector_input",
]


def build_info(endpoints: Iterable[Endpoint], embedded: ModelBuild | None) -> GaugeMetricFamily:
    """``lpr_build_info``: 1 per Triton endpoint, the versions as labels: the package's, the
    endpoint's Triton's and the build of the models it serves. That build is ``embedded``, the
    ``build_info.json`` of the repository the embedded Triton serves, when there is one; else
    what the endpoint's model config says (the detector's input). Before any endpoint (an
    embedded Triton starting), one series with an empty ``endpoint``."""
    family = gauge(
        "lpr_build_info",
        "1 per Triton endpoint; the versions as labels: the package's, the Triton server's "
        "and the served models' build (unknown until known).",
        BUILD_INFO_LABELS,
    )
    served = [
        (e.url, e.triton_version or UNKNOWN, embedded or e.model_build or ModelBuild())
        for e in endpoints
    ]
    version = package_version()
    for endpoint, triton_version, model in served or [("", UNKNOWN, embedded or ModelBuild())]:
        family.add_metric(
            [
                endpoint,
                version,
                triton_version,
                model.built_at,
                model.runtime,
                model.precision,
                model.detector_input,
            ],
            1,
        )
    return family
