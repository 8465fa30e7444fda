"""The service: every camera's pipeline, one Triton stream, the event sinks.

Start order: Triton (embedded unless a URL is configured) -> the inference
stream -> sinks -> cameras. Stop order is the reverse: cameras stop decoding,
their pipelines finish the frames in flight (bounded by the request deadline)
and flush their trackers, events are written, then the stream, then Triton.

Camera pipelines and the embedded Triton's watchdog run supervised
(streamer/pipeline/supervisor.py): a part that crashes is logged with its traceback and
restarted with backoff; an embedded Triton that dies is restarted on the same
ports (streamer/inference/embedded/watchdog.py). ``/readyz`` and the ``lpr_part_*`` metrics
say which part is down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields

from prometheus_client.core import Metric

from streamer.config.schema import CameraConfig, Settings
from streamer.delivery.events import EventSink, JsonLinesSink, PlateEvent
from streamer.delivery.outbox import OutboxError
from streamer.delivery.publisher import EventPublisher
from streamer.delivery.webhooks import create_webhook_sink
from streamer.inference.client import PlateRecognizer, scheduler_for
from streamer.inference.embedded.server import EmbeddedTriton, TritonStartError
from streamer.inference.embedded.watchdog import TritonWatchdog
from streamer.ingest.frame_queue import FrameQueue
from streamer.ingest.motion import MotionGate
from streamer.ingest.source import CameraSource
from streamer.ops.metrics import Metrics, counter, gauge
from streamer.ops.server import OpsServer
from streamer.ops.startup import (
    check_model_repository,
    listen_error,
    outbox_error,
    triton_start_error,
)
from streamer.pipeline.camera import CameraPipeline, OnResult
from streamer.pipeline.supervisor import Supervisor
from streamer.tracking.passes import PassDetector, PassParams, PlatePass
from streamer.tracking.plate_formats import PlateFormats
from streamer.tracking.tracker import TrackerParams
from streamer.web import WebServer
from streamer.web.view_source import CameraStatus, Snapshot

LOG = logging.getLogger(__name__)

#: Sampled frames waiting for a free in-flight slot, per camera.
FRAME_QUEUE_SIZE = 2
#: At shutdown (SIGTERM: target 5 s in all), how long the frames in flight may take...
FRAMES_GRACE_S = 1.5
#: ...the queued events to reach the sinks (normally milliseconds)...
DRAIN_TIMEOUT_S = 15.0
#: ...and the embedded Triton to exit before its process group is killed.
TRITON_STOP_S = 2.0


@dataclass
class Camera:
    config: CameraConfig
    queue: FrameQueue
    source: CameraSource
    pipeline: CameraPipeline
    task: asyncio.Task[None] | None = None


class Service:
    def __init__(
        self,
        settings: Settings,
        *,
        once: bool = False,
        extra_sinks: Sequence[EventSink] = (),
        on_result: OnResult | None = None,
    ) -> None:
        """``extra_sinks`` get every event after the configured sinks; ``on_result`` sees
        every frame's reads, in order per camera (``python -m streamer replay`` uses both)."""
        self.settings = settings
        self.once = once
        self.triton: EmbeddedTriton | None = None
        self.watchdog: TritonWatchdog | None = None
        self.supervisor = Supervisor()
        self.recognizer: PlateRecognizer | None = None
        self.sinks: list[EventSink] = []
        self.extra_sinks = tuple(extra_sinks)
        self.on_result = on_result
        self.cameras: dict[str, Camera] = {}
        self.metrics = Metrics()
        self.metrics.add_collector(self._collect_state)
        self.publisher = EventPublisher(
            self.sinks, self.metrics, jpeg_quality=settings.events.crop_jpeg_quality
        )
        self.recent = self.publisher.recent
        self.ops: OpsServer | None = None
        self.web: WebServer | None = None
        self._stop = asyncio.Event()

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> int:
        """Run until stopped (or, with ``once``, until every camera has ended).

        Returns 0; with ``once``, 1 when a camera never delivered a frame or Triton never
        answered one (after printing a per-camera summary to stderr). Raises
        :class:`StartupError` when a part cannot start."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, self.request_stop)
        try:
            # SIGTERM during start-up (Triton loading its models, say) stops it there.
            start = asyncio.create_task(self._start(), name="start")
            stopped = asyncio.create_task(self._stop.wait(), name="stop-during-start")
            await asyncio.wait({start, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if not start.done():
                LOG.info("stopping during start-up")
                start.cancel()
            await asyncio.gather(stopped, return_exceptions=True)
            try:
                await start
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # the service itself is cancelled, not only its start
            else:
                await self._wait()
        finally:
            await self._shutdown()
            for signum in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(signum)
        return self._summary() if self.once else 0

    def _summary(self) -> int:
        """``--once``: a line per camera on stderr; 1 if a camera or Triton never delivered."""
        code = 0
        for name, camera in self.cameras.items():
            source, stats = camera.source.stats, camera.pipeline.stats
            line = (
                f"{name}: {source.decoded} frames decoded, {stats.sent} sent, "
                f"{stats.answered} answered, {stats.failed} failed, "
                f"{self.publisher.by_camera[name]} events"
            )
            if source.decoded == 0:
                line += f"; never delivered a frame ({source.last_error or 'no frames'})"
                code = 1
            elif stats.sent and not stats.answered:
                line += "; Triton answered none of its frames"
                code = 1
            print(line, file=sys.stderr, flush=True)
        return code

    async def _start(self) -> None:
        """Start every part; raises :class:`StartupError` (one line) for what a user can fix."""
        metrics, web = self.settings.metrics, self.settings.web
        if metrics.enabled:
            self.ops = OpsServer(self.metrics.registry, self.readiness, self.liveness)
            try:
                await self.ops.start(metrics.host, metrics.port)
            except OSError as exc:
                raise listen_error(exc, metrics.host, metrics.port, "metrics.port") from None
        if web.enabled:
            self.web = WebServer(self, web)
            try:
                await self.web.start()
            except OSError as exc:
                raise listen_error(exc, web.host, web.port, "web.port") from None
        triton = self.settings.triton
        url = triton.url
        if url is None:
            repository = triton.model_repository
            check_model_repository(repository)
            LOG.info("no Triton URL configured: starting an embedded CPU Triton on %s", repository)
            self.triton = EmbeddedTriton(
                repository, startup_timeout_s=triton.embedded_startup_timeout_s
            )
            try:
                await self.triton.astart()
            except TritonStartError as exc:
                LOG.debug("the embedded Triton did not start: %s", exc)
                raise triton_start_error(exc) from None
            url = self.triton.grpc_url
            self.watchdog = TritonWatchdog(self.triton)
            self.supervisor.start("triton", self.watchdog.watch)
        self.recognizer = PlateRecognizer(
            url,
            triton.model,
            scheduler=scheduler_for(triton),
            request_timeout_s=triton.request_timeout_s,
            connect_timeout_s=triton.connect_timeout_s,
        )
        await self.recognizer.start()
        try:
            await self.recognizer.wait_ready(triton.connect_timeout_s + 5)
        except TimeoutError:
            # Keep running: the stream reconnects in the background, /readyz says
            # not ready, and frames fail (counted) until Triton answers.
            LOG.warning("Triton at %s is not ready yet; starting anyway, retrying", url)

        events = self.settings.events
        if events.stdout:
            self.sinks.append(JsonLinesSink.stdout(include_crop=False))
        if events.file is not None:
            self.sinks.append(JsonLinesSink(events.file))
        try:
            webhooks = await create_webhook_sink(self.settings, self.metrics)
        except OutboxError as exc:
            raise outbox_error(self.settings.outbox.path, exc) from None
        if webhooks is not None:
            self.sinks.append(webhooks)
        self.sinks += self.extra_sinks
        self.publisher.sinks = list(self.sinks)
        self.supervisor.start("events", self.publisher.run)

        for config in self.settings.cameras:
            if config.enabled:
                self.cameras[config.name] = self._camera(config)
        for camera in self.cameras.values():
            camera.source.start()
            camera.task = self.supervisor.start(f"camera-{camera.config.name}", camera.pipeline.run)
        LOG.info("running %d camera(s): %s", len(self.cameras), ", ".join(self.cameras))

    def _camera(self, config: CameraConfig) -> Camera:
        assert self.recognizer is not None
        self.recognizer.scheduler.set_weight(config.name, config.weight)
        live = not config.is_file or config.realtime
        # Live sources drop the oldest waiting frame when inference falls behind;
        # files played as fast as possible wait instead, so no frame is lost.
        queue = FrameQueue(FRAME_QUEUE_SIZE, "drop_oldest" if live else "wait")
        gate = MotionGate.from_config(config.motion) if config.motion.enabled else None
        source = CameraSource(
            config.name,
            config.url,
            sample_fps=config.sample_fps,
            realtime=config.realtime,
            loop_file=not self.once,
            queue=queue,
            rtsp_transport=config.rtsp_transport,
            open_timeout_s=config.open_timeout_s,
            read_timeout_s=config.read_timeout_s,
            stall_timeout_s=config.stall_timeout_s,
            reconnect_initial_delay_s=config.reconnect_initial_delay_s,
            reconnect_max_delay_s=config.reconnect_max_delay_s,
            redacted_url=config.redacted_url,
            motion_gate=gate,
            skip_non_reference=config.skip_non_reference_frames,
        )
        events = self.settings.events
        passes = PassDetector(
            config.name,
            TrackerParams(**self.settings.tracker.model_dump()),
            PassParams(
                **events.model_dump(include={f.name for f in fields(PassParams)}),
                decide=config.decide,
            ),
            PlateFormats(events.plate_formats),
            events.min_text_score,
            self.settings.known_plates_for(config),
        )
        pipeline = CameraPipeline(
            config.name,
            queue,
            self.recognizer,
            passes,
            self._publish,
            max_in_flight=self.settings.triton.max_in_flight_per_camera,
            roi=tuple(config.roi) if config.roi else None,  # type: ignore[arg-type]
            min_plate_width=config.min_plate_width,
            metrics=self.metrics,
            tracks=gate.tracks if gate is not None else None,
            on_result=self.on_result,
        )
        return Camera(config, queue, source, pipeline)

    async def _publish(self, passes: list[PlatePass]) -> None:
        self.publisher.submit(passes)  # never waits: the pipeline goes back to its frames

    @property
    def events_emitted(self) -> int:
        """Passes reported (version 1)."""
        return self.publisher.emitted

    @property
    def updates_emitted(self) -> int:
        """Corrections reported (plate.updated)."""
        return self.publisher.updates

    # -- ViewSource (streamer/web/view_source.py): what the web view reads ---------------------

    def camera_status(self) -> list[CameraStatus]:
        statuses = []
        for name, camera in self.cameras.items():
            stats, pipeline = camera.source.stats, camera.pipeline
            last = pipeline.last_result
            statuses.append(
                CameraStatus(
                    name=name,
                    state=stats.state,
                    url=camera.config.redacted_url,
                    decode_fps=round(stats.fps, 2),
                    sample_fps=camera.config.sample_fps,
                    last_error=stats.last_error,
                    frames_decoded=stats.decoded,
                    frames_sent=pipeline.stats.sent,
                    frames_dropped=camera.queue.dropped + pipeline.stats.failed,
                    width=last.frame.width if last else None,
                    height=last.frame.height if last else None,
                )
            )
        return statuses

    def snapshot(self, camera: str) -> Snapshot | None:
        """The latest recognised frame, or a newer one the motion gate skipped (a still
        scene: the plates tracked last are drawn on it)."""
        entry = self.cameras.get(camera)
        if entry is None or entry.pipeline.last_result is None:
            return None
        frame = entry.pipeline.last_result.frame
        preview = entry.source.latest_preview
        if preview is not None and preview.monotonic > frame.monotonic:
            frame = preview
        return Snapshot(frame, entry.pipeline.passes.last_tracked)

    def recent_events(self) -> list[PlateEvent]:
        return self.recent.latest()

    def event(self, event_id: str) -> PlateEvent | None:
        return self.recent.find(event_id)

    def liveness(self) -> tuple[bool, dict[str, object]]:
        """Alive unless a supervised part is in a crash loop (``/healthz``)."""
        looping = self.supervisor.crash_looping()
        return not looping, ({"crash_loop": looping} if looping else {})

    def readiness(self) -> tuple[bool, dict[str, object]]:
        """Ready when the Triton stream is open (model ready), every sink is healthy and no
        supervised part is waiting to restart."""
        triton_ready = self.recognizer is not None and self.recognizer.ready
        parts = {name: part.to_dict() for name, part in self.supervisor.parts.items()}
        parts_ok = all(part["state"] != "restarting" for part in parts.values())
        recognizer = self.recognizer
        if self.watchdog is not None and self.watchdog.state == "restarting":
            triton_state = "restarting"
        elif recognizer is not None and triton_ready and recognizer.model_failing:
            triton_state = f"model {recognizer.model} failing: {recognizer.last_model_error}"
        else:
            triton_state = "ready" if triton_ready else "unavailable"
        failing = dict(self.publisher.failing)
        for sink in self.sinks:
            if not getattr(sink, "healthy", True):
                failing.setdefault(sink.name, "failing")
        sinks_ok = not failing
        cameras = {
            name: {
                "state": camera.source.stats.state,
                "url": camera.config.redacted_url,
                "last_error": camera.source.stats.last_error,
            }
            for name, camera in self.cameras.items()
        }
        # Files loop outside --once, so a running service always has a camera to deliver.
        delivering = sum(1 for c in self.cameras.values() if c.source.stats.state == "connected")
        cameras_ok = not self.cameras or delivering > 0
        details: dict[str, object] = {
            "triton": triton_state,
            "cameras_delivering": delivering,
            "sinks": "ok" if sinks_ok else failing,
            "cameras": cameras,
            "parts": parts,
        }
        ready = triton_state == "ready" and sinks_ok and parts_ok and cameras_ok
        return ready, details

    def _collect_state(self) -> list[Metric]:
        """Counters kept by the decode threads and pipelines, read at scrape time."""
        per_camera = {
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
        families: list[Metric] = []
        for name, (doc, value) in per_camera.items():
            family = counter(name, doc, ["camera"])
            for camera_name, camera in self.cameras.items():
                family.add_metric([camera_name], value(camera))
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
        for camera_name, c in self.cameras.items():
            stats = c.pipeline.stats
            dropped.add_metric([camera_name, "backpressure"], c.queue.dropped + stats.superseded)
            dropped.add_metric([camera_name, "inference_failed"], stats.failed)
            in_flight.add_metric([camera_name], self._scheduler_held(camera_name))
            tracks.add_metric([camera_name], c.pipeline.passes.active_tracks)
            up.add_metric([camera_name], 1.0 if c.source.stats.state == "connected" else 0.0)
        ready = gauge("lpr_triton_ready", "1 while the stream to Triton is open.", [])
        ready.add_metric([], 1.0 if self.recognizer is not None and self.recognizer.ready else 0)
        families += [dropped, in_flight, tracks, up, ready]
        withheld = counter(
            "lpr_passes_withheld",
            "Vehicle passes not reported, by reason: duplicate (the same text within "
            "events.dedup_window_s) or low_confidence (under events.min_confidence).",
            ["camera", "reason"],
        )
        for camera_name, c in self.cameras.items():
            withheld.add_metric([camera_name, "duplicate"], c.pipeline.passes.suppressed)
            withheld.add_metric([camera_name, "low_confidence"], c.pipeline.passes.unsure)
        families.append(withheld)
        skipped = counter(
            "lpr_frames_skipped",
            "Sampled frames not sent on purpose, by reason: no_motion (the motion gate).",
            ["camera", "reason"],
        )
        for camera_name, c in self.cameras.items():
            skipped.add_metric([camera_name, "no_motion"], c.source.stats.skipped_no_motion)
        families.append(skipped)
        restarts = counter(
            "lpr_part_restarts",
            "Restarts of a supervised part (camera-<name>, triton) after it crashed or died.",
            ["part"],
        )
        running = gauge("lpr_part_running", "1 while a supervised part runs.", ["part"])
        for name, part in self.supervisor.parts.items():
            count, up = part.restarts, part.state == "running"
            if name == "triton" and self.watchdog is not None:  # it restarts the server itself
                count, up = self.watchdog.restarts, up and self.watchdog.state == "running"
            restarts.add_metric([name], count)
            running.add_metric([name], 1.0 if up else 0.0)
        families += [restarts, running]
        if self.recognizer is not None:
            families += self._inference_state(self.recognizer)
        return families

    def _scheduler_held(self, camera: str) -> int:
        return self.recognizer.scheduler.held(camera) if self.recognizer is not None else 0

    @staticmethod
    def _inference_state(recognizer: PlateRecognizer) -> list[Metric]:
        """The shared window and what the stream holds, read at scrape time."""
        scheduler, stats = recognizer.scheduler, recognizer.stats
        window = gauge(
            "lpr_inference_window", "Frames allowed at Triton at once (adaptive window).", []
        )
        window.add_metric([], scheduler.window.limit)
        held = gauge("lpr_inference_in_flight", "Inference permits held now (all cameras).", [])
        held.add_metric([], scheduler.in_flight)
        at_triton = gauge("lpr_inference_at_triton", "Frames written to Triton, unanswered.", [])
        at_triton.add_metric([], recognizer.at_triton)
        waiting = gauge("lpr_inference_waiting_cameras", "Cameras waiting for a permit.", [])
        waiting.add_metric([], scheduler.waiting)
        no_load = gauge(
            "lpr_inference_no_load_latency_seconds",
            "Minimum latency of recent answers: the window's reference.",
            [],
        )
        no_load.add_metric([], scheduler.window.no_load_latency_s or 0.0)
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
        return [window, held, at_triton, waiting, no_load, late, resets]

    async def _wait(self) -> None:
        stop = asyncio.create_task(self._stop.wait(), name="stop-signal")
        pending: set[asyncio.Future[None]] = {c.task for c in self.cameras.values() if c.task}
        try:
            if not self.once:
                pending = set()
            while not self._stop.is_set():
                done, _ = await asyncio.wait({stop, *pending}, return_when=asyncio.FIRST_COMPLETED)
                pending -= done
                if self.once and not pending:
                    LOG.info("every camera has ended (--once)")
                    return
        finally:
            stop.cancel()
            await asyncio.gather(stop, return_exceptions=True)

    async def _shutdown(self) -> None:
        """Idempotent; every task cancelled or finished and awaited."""
        if self.web is not None:  # viewers let go before the cameras stop
            await self.web.stop()
        for camera in self.cameras.values():
            await camera.source.astop()
        # The sources are stopped, so each pipeline sees the end of its queue, finishes its
        # frames in flight and flushes its tracker; frames Triton has not answered within the
        # grace are given up, and the open passes are flushed all the same.
        running = {c.task: c for c in self.cameras.values() if c.task and not c.task.done()}
        if running:
            _, late = await asyncio.wait(running, timeout=FRAMES_GRACE_S)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
            for task in late:
                self.publisher.submit(running[task].pipeline.passes.flush())
        if self.supervisor.task("events") is not None:  # the flushed passes reach the sinks
            await self.publisher.drain(DRAIN_TIMEOUT_S)
        for sink in self.sinks:
            await sink.close()
        if self.recognizer is not None:
            await self.recognizer.close()
        await self.supervisor.stop()  # the watchdog first: it must not restart Triton now
        if self.triton is not None:
            # It holds no state: SIGTERM, then SIGKILL of its group if it takes longer (its
            # stubs and shared memory are cleaned up either way).
            await self.triton.astop(TRITON_STOP_S)
        if self.ops is not None:
            await self.ops.stop()
