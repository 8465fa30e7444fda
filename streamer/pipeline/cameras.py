"""The running cameras: each one's source, queue and pipeline, started, stopped and replaced.

A camera is built from its config section: a :class:`CameraSource` (decode thread) fills a
bounded :class:`FrameQueue`, and a :class:`CameraPipeline` (supervised, part
``camera-<name>``) takes frames to Triton and its reads to the pass detector. Stopping a
camera stops its decoder; the pipeline then sees the end of its queue, finishes the frames in
flight (within a grace) and flushes its open passes, which go to the events publisher like
any other. Reload (streamer/ops/reload.py) adds, removes and replaces cameras one by one
here; the cameras it leaves alone are never touched.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TextIO

from streamer.config import CameraConfig, Settings
from streamer.domain.cameras import CameraStatus, Snapshot
from streamer.domain.known_plates import KnownPlates
from streamer.domain.plate_formats import PlateFormats
from streamer.domain.plate_pass import PlatePass
from streamer.foundation.metrics import Metrics
from streamer.foundation.supervisor import Supervisor
from streamer.inference.client import ERROR_KINDS
from streamer.ingest.frame_queue import FrameQueue
from streamer.ingest.motion import MotionGate
from streamer.ingest.source import CameraSource
from streamer.pipeline.camera import CameraPipeline, Inference, OnFate, OnPasses, OnResult
from streamer.pipeline.camera_health import RateMeter, describe
from streamer.tracking.pass_params import PassParams
from streamer.tracking.passes import PassDetector
from streamer.tracking.tracker import TrackerParams

LOG = logging.getLogger(__name__)

#: Sampled frames waiting for the camera's turn at Triton. A live camera keeps only its
#: newest (it sends nothing older; each 1080p picture is 3.1 MB of the decoder's pool); a
#: file played as fast as possible decodes one ahead, so decoding overlaps inference.
LIVE_QUEUE_SIZE = 1
FILE_QUEUE_SIZE = 2


@dataclass
class Camera:
    """One running camera."""

    config: CameraConfig
    queue: FrameQueue
    source: CameraSource
    pipeline: CameraPipeline
    task: asyncio.Task[None] | None = None
    #: Its answered and dropped frames per second, measured when its status is read.
    rates: RateMeter = field(default_factory=RateMeter)

    @property
    def part(self) -> str:
        """Its pipeline's name as a supervised part."""
        return part_name(self.config.name)


def part_name(camera: str) -> str:
    return f"camera-{camera}"


def pass_detector(config: CameraConfig, settings: Settings) -> PassDetector:
    """The camera's decision rules, from the tracker, events and known-plates settings."""
    return PassDetector(config.name, *decision_rules(config, settings))


def decision_rules(
    config: CameraConfig, settings: Settings
) -> tuple[TrackerParams, PassParams, PlateFormats, float, KnownPlates]:
    """What :class:`PassDetector` takes, in its order (also for reconfiguring one)."""
    events = settings.events
    return (
        TrackerParams.from_config(settings.tracker),
        PassParams.from_config(events, config.decide),
        PlateFormats(events.plate_formats),
        events.min_text_score,
        settings.known_plates_for(config),
    )


class Cameras(Mapping[str, Camera]):
    """The cameras of the service, by name (see the module docstring)."""

    def __init__(
        self,
        supervisor: Supervisor,
        metrics: Metrics,
        on_passes: OnPasses,
        submit: Callable[[list[PlatePass]], None],
        *,
        once: bool = False,
        on_result: OnResult | None = None,
        on_fate: OnFate | None = None,
    ) -> None:
        """``on_passes`` takes the passes a pipeline decides; ``submit`` the passes flushed
        here when a pipeline had to be cancelled (it must not wait). The inference client
        (``recognizer``) is set once the service has connected it, before the first start."""
        self.recognizer: Inference | None = None
        self.supervisor = supervisor
        self.metrics = metrics
        self.on_passes = on_passes
        self.submit = submit
        self.once = once
        self.on_result = on_result
        self.on_fate = on_fate  # told how each track ended (replay)
        self.running: dict[str, Camera] = {}
        metrics.known(metrics.triton_errors, *((kind,) for kind in ERROR_KINDS))

    # A read-only mapping of the running cameras by name (a reload changes it).
    def __iter__(self) -> Iterator[str]:
        return iter(list(self.running))

    def __len__(self) -> int:
        return len(self.running)

    def __getitem__(self, name: str) -> Camera:
        return self.running[name]

    def build(self, config: CameraConfig, settings: Settings) -> Camera:
        if self.recognizer is None:
            raise RuntimeError("cameras start once the inference client is connected")
        self.recognizer.set_weight(config.name, config.weight)
        live = not config.is_file or config.realtime
        # Live sources drop the oldest waiting frame when inference falls behind;
        # files played as fast as possible wait instead, so no frame is lost.
        queue = (
            FrameQueue(LIVE_QUEUE_SIZE, "drop_oldest")
            if live
            else FrameQueue(FILE_QUEUE_SIZE, "wait")
        )
        motion = config.motion
        gate = MotionGate.from_config(motion) if motion.enabled or motion.regions else None
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
        passes = pass_detector(config, settings)
        passes.on_fate = self.on_fate
        pipeline = CameraPipeline(
            config.name,
            queue,
            self.recognizer,
            passes,
            self.on_passes,
            max_in_flight=settings.triton.max_in_flight_per_camera,
            roi=tuple(config.roi) if config.roi else None,  # type: ignore[arg-type]
            min_plate_width=config.min_plate_width,
            metrics=self.metrics,
            tracks=gate.tracks if gate is not None else None,
            on_result=self.on_result,
        )
        return Camera(config, queue, source, pipeline)

    def start(self, config: CameraConfig, settings: Settings) -> Camera:
        """Build the camera and start its decoder and its supervised pipeline."""
        if config.name in self.running:
            raise RuntimeError(f"camera {config.name!r} is already running")
        camera = self.build(config, settings)
        self.running[config.name] = camera
        self.metrics.camera_started(config.name)
        camera.source.start()
        camera.task = self.supervisor.start(camera.part, camera.pipeline.run)
        return camera

    async def stop(
        self, names: list[str] | None = None, *, grace_s: float, forget: bool = True
    ) -> None:
        """Stop these cameras (every one if None): decoders first, then their pipelines.

        Each pipeline finishes its frames in flight and flushes its open passes; one that
        takes longer than ``grace_s`` (Triton not answering) is cancelled and its passes are
        flushed here. With ``forget``, the cameras are then forgotten: no part, no
        scheduler weight, no series in the metrics (a reload); without it they stay listed,
        stopped (shutdown).
        """
        wanted = list(self.running) if names is None else names
        stopping = [self.running[n] for n in wanted if n in self.running]
        if not stopping:
            return
        await asyncio.gather(*(camera.source.astop() for camera in stopping))
        running = {c.task: c for c in stopping if c.task is not None and not c.task.done()}
        if running:
            _, late = await asyncio.wait(running, timeout=grace_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
            for task in late:
                passes = running[task].pipeline.passes
                self.submit([*passes.flush(), *passes.take_withheld()])
        for camera in stopping if forget else ():
            await self.supervisor.remove(camera.part)
            if self.recognizer is not None:
                self.recognizer.forget(camera.config.name)
            self.metrics.camera_removed(camera.config.name)
            del self.running[camera.config.name]

    def erase(self, plate: str | None, event_id: str | None) -> tuple[int, set[str]]:
        """An erasure: the open passes of every camera that hold ``plate`` (or are the pass
        ``event_id``) are never reported; (how many, the ids of those already reported)."""
        count, ids = 0, set[str]()
        for camera in list(self.values()):
            stopped, reported = camera.pipeline.passes.erase(plate, event_id)
            count += stopped
            ids |= reported
        return count, ids

    def reconfigure(self, settings: Settings) -> None:
        """Give every running camera the decision rules of ``settings`` (tracker, events,
        known plates): decisions from now on follow them, open tracks keep their evidence."""
        for camera in list(self.values()):
            camera.pipeline.passes.reconfigure(*decision_rules(camera.config, settings))

    # -- what the web view reads (streamer/web/view_source.py) --------------------------------

    def status(self) -> list[CameraStatus]:
        """What the web view shows of each camera."""
        statuses = []
        for camera in list(self.values()):
            stats, pipeline = camera.source.stats, camera.pipeline
            last = pipeline.last_result
            dropped = camera.queue.dropped + pipeline.stats.failed
            rates = camera.rates.read(pipeline.stats.answered, dropped)
            statuses.append(
                CameraStatus(
                    name=camera.config.name,
                    state=stats.state,
                    health=describe(stats.state, rates, camera.config.sample_fps, stats.last_error),
                    url=camera.config.redacted_url,
                    decode_fps=round(stats.fps, 2),
                    sample_fps=camera.config.sample_fps,
                    answered_fps=rates.answered_fps,
                    last_error=stats.last_error,
                    frames_decoded=stats.decoded,
                    frames_sent=pipeline.stats.sent,
                    frames_answered=pipeline.stats.answered,
                    frames_dropped=dropped,
                    width=last.frame.width if last else None,
                    height=last.frame.height if last else None,
                )
            )
        return statuses

    def snapshot(self, camera: str) -> Snapshot | None:
        """The latest recognised frame, or a newer one the motion gate skipped (a still
        scene: the plates tracked last are drawn on it)."""
        entry = self.running.get(camera)
        if entry is None or entry.pipeline.last_result is None:
            return None
        frame = entry.pipeline.last_result.frame
        preview = entry.source.latest_preview
        if preview is not None and preview.monotonic > frame.monotonic:
            frame = preview
        return Snapshot(frame, entry.pipeline.passes.last_tracked)

    def summary(self, events: Mapping[str, int], out: TextIO) -> int:
        """``--once``: a line per camera (frames, answers, ``events`` by camera) to ``out``;
        1 if a camera never delivered a frame or Triton answered none of its frames."""
        code = 0
        for camera in self.values():
            name, source, stats = camera.config.name, camera.source.stats, camera.pipeline.stats
            line = (
                f"{name}: {source.decoded} frames decoded, {stats.sent} sent, "
                f"{stats.answered} answered, {stats.failed} failed, {events.get(name, 0)} events"
            )
            if source.decoded == 0:
                line += f"; never delivered a frame ({source.last_error or 'no frames'})"
                code = 1
            elif stats.sent and not stats.answered:
                line += "; Triton answered none of its frames"
                code = 1
            print(line, file=out, flush=True)
        return code
