"""streamer.ingest.motion: the detector and the gate on synthetic images, then on real footage.

The footage tests build their clips from ``yard_cam.ts`` with Debian's ffmpeg (libx264): a
frozen frame (no motion) followed by the real clip (a car manoeuvring), decoded by the real
CameraSource; the acceptance test runs the whole service on the embedded Triton.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from prometheus_client import generate_latest

from bench.common import inference_counts
from streamer.app import Service
from streamer.config import MotionConfig, load_config
from streamer.domain.frames import Frame
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.ingest.frame_queue import FrameQueue
from streamer.ingest.motion import MotionDetector, MotionGate, TrackSignal, small_gray
from streamer.ingest.source import CameraSource
from tests.footage import YARD_CLIP, YARD_FPS, encode_yard, sample_times

FRAME = (1920, 1080)  # the frame the synthetic 320x180 images stand for
SMALL = (180, 320)
DEFAULTS = {"threshold": 20, "min_area": 0.0005}  # the config's defaults (MotionConfig)
FPS = YARD_FPS


def _scene(seed: int = 1) -> np.ndarray:
    """A textured grey 320x180 image (smooth blobs, like a blurred yard)."""
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 256, size=SMALL, dtype=np.uint8)
    return cv2.GaussianBlur(noise, (0, 0), 4).astype(np.uint8) // 2 + 64


def _noisy(image: np.ndarray, rng: np.random.Generator, amplitude: int = 3) -> np.ndarray:
    """``image`` with sensor-like noise of +-``amplitude`` grey levels."""
    noise = rng.integers(-amplitude, amplitude + 1, size=image.shape)
    return np.clip(image.astype(np.int16) + noise, 0, 255).astype(np.uint8)


def _with_block(image: np.ndarray, x: int, y: int, size: int = 20, value: int = 230) -> np.ndarray:
    out = image.copy()
    out[y : y + size, x : x + size] = value
    return out


def _detector(**kwargs: object) -> MotionDetector:
    options: dict = {**DEFAULTS, "mask": []}
    options.update(kwargs)
    return MotionDetector(**options)


# --------------------------------------------------------------------------- detector


def test_first_image_counts_as_motion_then_a_still_noisy_scene_does_not() -> None:
    detector = _detector()
    rng = np.random.default_rng(0)
    scene = _scene()
    assert detector.update(scene, FRAME) is True  # no reference yet: unknown is motion
    for _ in range(50):  # noise is random: it never adds up against the reference
        assert detector.update(_noisy(scene, rng), FRAME) is False
        assert detector.last_area < DEFAULTS["min_area"]


def test_a_moving_block_is_motion() -> None:
    detector = _detector()
    scene = _scene()
    detector.update(_with_block(scene, 100, 80), FRAME)
    assert detector.update(_with_block(scene, 112, 80), FRAME) is True
    assert detector.last_area >= DEFAULTS["min_area"]
    # The reference moved on to the latest frame with motion: the block standing there is still.
    assert detector.update(_with_block(scene, 112, 80), FRAME) is False


def test_the_boxes_of_what_moved_are_in_frame_pixels() -> None:
    detector = _detector()
    scene = _scene()
    detector.update(scene, FRAME)
    # Two blocks appear: 20x20 at (100, 80) and (250, 20) of the 320x180 image (6x scale).
    assert detector.update(_with_block(_with_block(scene, 100, 80), 250, 20), FRAME)
    boxes = sorted(detector.last_boxes.tolist())
    assert len(boxes) == 2
    for box, (x, y) in zip(boxes, [(100, 80), (250, 20)], strict=True):
        # The block, grown by the blur and the dilation by a few small-image pixels.
        assert x * 6 - 30 <= box[0] <= x * 6 and y * 6 - 30 <= box[1] <= y * 6
        assert (x + 20) * 6 <= box[2] <= (x + 20) * 6 + 30
        assert (y + 20) * 6 <= box[3] <= (y + 20) * 6 + 30
    # Still: no boxes; a reset (or the first image): none either, the whole frame is unknown.
    assert not detector.update(_with_block(_with_block(scene, 100, 80), 250, 20), FRAME)
    assert detector.last_boxes.shape == (0, 4)


def test_motion_inside_the_mask_is_ignored_outside_it_is_not() -> None:
    scene = _scene()
    # A block at (20..40, 20..40) of the 320x180 image; the mask is in 1920x1080 frame pixels.
    mask = [[(60, 60), (300, 60), (300, 300), (60, 300)]]
    masked = _detector(mask=mask)
    masked.update(scene, FRAME)
    assert masked.update(_with_block(scene, 20, 20), FRAME) is False
    assert masked.update(_with_block(scene, 200, 120), FRAME) is True
    plain = _detector()
    plain.update(scene, FRAME)
    assert plain.update(_with_block(scene, 20, 20), FRAME) is True


def test_the_mask_scales_with_the_frame_size() -> None:
    scene = _scene()
    # The same polygon in the pixels of a 640x360 frame covers 3 times as much of the image.
    detector = _detector(mask=[[(0, 0), (100, 0), (100, 100), (0, 100)]])
    detector.update(scene, (640, 360))
    assert detector.update(_with_block(scene, 20, 20, size=20), (640, 360)) is False
    other = _detector(mask=[[(0, 0), (100, 0), (100, 100), (0, 100)]])
    other.update(scene, FRAME)  # in a 1920x1080 frame it covers only (0..17, 0..17)
    assert other.update(_with_block(scene, 20, 20, size=20), FRAME) is True


def test_a_change_below_min_area_is_not_motion() -> None:
    scene = _scene()
    small_change = _with_block(scene, 150, 90, size=2, value=180)  # a far-away bird
    strict = _detector()
    strict.update(scene, FRAME)
    assert strict.update(small_change, FRAME) is False
    assert 0 < strict.last_area < DEFAULTS["min_area"]
    lenient = _detector(min_area=strict.last_area / 2)
    lenient.update(scene, FRAME)
    assert lenient.update(small_change, FRAME) is True


def test_a_change_below_threshold_is_not_motion() -> None:
    scene = _scene()
    brighter = scene.copy()
    brighter[40:140, 80:240] += 10  # a large area, 10 grey levels
    assert (d := _detector()).update(scene, FRAME) and d.update(brighter, FRAME) is False
    assert (d := _detector(threshold=5)).update(scene, FRAME) and d.update(brighter, FRAME) is True


def test_a_slow_creep_adds_up_until_it_counts() -> None:
    """A soft-edged object edging 1 pixel a check: each step is under the threshold, but the
    reference (the latest frame with motion) stays put, so the steps add up."""
    flat = np.full(SMALL, 100, dtype=np.uint8)

    def soft_block(x: int) -> np.ndarray:
        return cv2.GaussianBlur(_with_block(flat, x, 80, size=40, value=200), (0, 0), 4)

    detector = _detector()
    detector.update(soft_block(100), FRAME)
    results = [detector.update(soft_block(100 + step), FRAME) for step in range(1, 4)]
    assert results == [False, False, True]
    # Step by step against the previous image instead, the same creep is never motion.
    for step in range(1, 4):
        stepwise = _detector()
        stepwise.update(soft_block(100 + step - 1), FRAME)
        assert stepwise.update(soft_block(100 + step), FRAME) is False


def test_reset_and_a_new_size_start_afresh() -> None:
    detector = _detector()
    scene = _scene()
    detector.update(scene, FRAME)
    assert detector.update(scene, FRAME) is False
    detector.reset()
    assert detector.update(scene, FRAME) is True
    assert detector.update(cv2.resize(scene, (160, 90)), FRAME) is True


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 0}, "threshold must be 1-255"),
        ({"min_area": 0.0}, "min_area must be in (0, 1]"),
        ({"mask": [[(0, 0), (1, 1)]]}, "mask polygon 0 must be 3 or more [x, y] points"),
    ],
)
def test_detector_rejects_bad_parameters(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        _detector(**kwargs)


# --------------------------------------------------------------------------- gate


def _gate(tracks: TrackSignal | None = None, interval: float = 1.0) -> MotionGate:
    return MotionGate(_detector(), stationary_interval_s=interval, tracks=tracks or TrackSignal())


def test_gate_sends_the_first_frame_and_motion_and_skips_a_still_scene() -> None:
    gate = _gate()
    scene = _scene()
    assert gate.decide(scene, FRAME, 0.0) == "first"
    assert [gate.decide(scene, FRAME, 0.2 * i) for i in range(1, 20)] == ["skip"] * 19
    assert gate.decide(_with_block(scene, 100, 80), FRAME, 4.0) == "motion"
    gate.reset()  # a reconnect
    assert gate.decide(_with_block(scene, 100, 80), FRAME, 4.2) == "first"


def test_gate_rereads_a_still_scene_with_a_live_track_at_the_interval() -> None:
    tracks = TrackSignal()
    gate = _gate(tracks, interval=1.0)
    scene = _scene()
    times = [round(0.2 * i, 1) for i in range(21)]  # 0.0 .. 4.0 at 5 fps
    # Set from another thread, as the asyncio side does.
    setter = threading.Thread(target=tracks.set, args=(True,))
    setter.start()
    setter.join()
    decisions = {t: gate.decide(scene, FRAME, t) for t in times}
    sent = [t for t, d in decisions.items() if d != "skip"]
    assert sent == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert {decisions[t] for t in sent[1:]} == {"stationary"}
    # Motion restarts the interval from the frame it sent.
    assert gate.decide(_with_block(scene, 100, 80), FRAME, 4.4) == "motion"
    assert gate.decide(_with_block(scene, 100, 80), FRAME, 5.2) == "skip"
    assert gate.decide(_with_block(scene, 100, 80), FRAME, 5.4) == "stationary"
    tracks.set(False)  # the track ended: a still scene is skipped again
    assert gate.decide(_with_block(scene, 100, 80), FRAME, 9.0) == "skip"


def test_gate_gives_each_sent_frame_its_focus() -> None:
    tracks = TrackSignal()
    gate = MotionGate(_detector(), stationary_interval_s=1.0, tracks=tracks, regions=True)
    scene = _scene()
    assert gate.focus(gate.decide(scene, FRAME, 0.0)) is None  # first: anywhere
    moved = _with_block(scene, 100, 80)
    assert gate.decide(moved, FRAME, 0.2) == "motion"
    focus = gate.focus("motion")
    assert focus is not None and focus.shape == (1, 4) and 570 <= focus[0, 0] <= 600
    tracks.set(True)
    assert gate.decide(moved, FRAME, 1.2) == "stationary"
    stationary = gate.focus("stationary")  # nothing moved: only the tracks, added later
    assert stationary is not None and stationary.shape == (0, 4)
    off = MotionGate(_detector(), stationary_interval_s=1.0, tracks=tracks)
    off.decide(scene, FRAME, 0.0)
    assert off.decide(moved, FRAME, 0.2) == "motion"
    assert off.focus("motion") is None  # regions off: always the whole frame


def test_gate_treats_time_going_back_as_a_new_stretch() -> None:
    gate = _gate()
    scene = _scene()
    gate.decide(scene, FRAME, 10.0)
    assert gate.decide(scene, FRAME, 10.2) == "skip"
    assert gate.decide(scene, FRAME, 0.0) == "first"


# --------------------------------------------------------------------------- real footage

CLIP = YARD_CLIP
needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs Debian's ffmpeg")


#: libx264, a keyframe a second, close to the source's quality; mpegts like the cameras' clips.


@pytest.fixture(scope="module")
def frozen_then_moving(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The clip's first frame held for 3 s, then the clip's first 1.4 s (the car moves)."""
    out = tmp_path_factory.mktemp("motion") / "frozen_then_moving.ts"
    return encode_yard(out, "[0:v]tpad=start_mode=clone:start_duration=3,trim=end=4.4[out]")


def _sample_times(path: Path, fps: float = 5) -> list[float]:
    """Stream times a sampler at ``fps`` keeps, relative to the first frame."""
    kept = sample_times(path, fps)
    return [round(t - kept[0], 3) for t in kept]


async def _run_source(
    path: Path, gate: MotionGate | None, **kwargs: object
) -> tuple[list[Frame], CameraSource]:
    queue = FrameQueue(4, "wait")
    options: dict = {"sample_fps": 5, "realtime": False, "loop_file": False}
    options.update(kwargs)
    source = CameraSource("cam", str(path), queue=queue, motion_gate=gate, **options)
    source.start()
    frames: list[Frame] = []
    try:
        async with asyncio.timeout(60):
            while (frame := await queue.get()) is not None:
                frames.append(frame)
                if gate is not None:
                    gate.tracks.done(frame.index)  # answered at once, as a pipeline would
                if len(frames) >= 40:
                    break
    finally:
        await source.astop()
    return frames, source


async def _answer_after(
    path: Path, answer_s: float, live_from: int
) -> tuple[list[float], CameraSource]:
    """Play ``path`` as fast as possible through a gated source while a consumer "answers"
    each frame after ``answer_s`` and, from the ``live_from``-th frame sent on, says a track
    lives (as the pipeline does once the tracker has a track): the stream times sent."""
    tracks = TrackSignal()
    gate = MotionGate.from_config(MotionConfig(enabled=True), tracks)
    queue = FrameQueue(4, "wait")
    source = CameraSource(
        "cam",
        str(path),
        queue=queue,
        motion_gate=gate,
        sample_fps=5,
        realtime=False,
        loop_file=False,
    )
    source.start()
    frames: list[Frame] = []
    try:
        async with asyncio.timeout(120):
            while (frame := await queue.get()) is not None:
                frames.append(frame)
                await asyncio.sleep(answer_s)
                tracks.set(len(frames) >= live_from)
                tracks.done(frame.index)
    finally:
        await source.astop()
    return _relative(frames), source


def _relative(frames: list[Frame]) -> list[float]:
    return [round(f.pts_s - frames[0].pts_s, 3) for f in frames]


def test_small_gray_is_the_frame_shrunk_to_320_wide_grey() -> None:
    with av.open(str(CLIP)) as container:
        frame = next(container.decode(video=0))
    gray = small_gray(frame)
    assert gray.shape == (180, 320) and gray.dtype == np.uint8
    expected = cv2.resize(
        cv2.cvtColor(frame.to_ndarray(format="bgr24"), cv2.COLOR_BGR2GRAY),
        (320, 180),
        interpolation=cv2.INTER_AREA,
    )
    assert np.abs(gray.astype(int) - expected.astype(int)).mean() < 3
    # A pixel format without a luma plane goes through swscale: the same picture.
    via_rgb = small_gray(frame.reformat(format="rgb24"))
    assert via_rgb.shape == (180, 320)
    assert np.abs(via_rgb.astype(int) - expected.astype(int)).mean() < 3


@needs_ffmpeg
async def test_camera_source_skips_and_counts_the_frozen_frames(frozen_then_moving: Path) -> None:
    slots = _sample_times(frozen_then_moving)
    gate = MotionGate.from_config(MotionConfig(enabled=True))
    frames, source = await _run_source(frozen_then_moving, gate)
    times = _relative(frames)
    # The first frame is sent; none of the frozen 3 s after it; every moving one after them.
    assert times[0] == 0.0
    assert not [t for t in times[1:] if t <= 3.0]
    assert times[1:] == [t for t in slots if t > 3.0]
    stats = source.stats
    assert stats.skipped_no_motion == len(slots) - len(frames) >= 14
    assert stats.sampled == len(frames)
    assert frames[0].image.shape == (1080, 1920, 3)
    assert [f.index for f in frames] == list(range(len(frames)))
    # The live view still gets a skipped frame of the frozen stretch to show.
    preview = source.latest_preview
    assert preview is not None and preview.image.shape == (1080, 1920, 3)
    assert 0.0 < preview.pts_s - frames[0].pts_s <= 3.0


@needs_ffmpeg
async def test_camera_source_rereads_a_frozen_scene_with_a_live_track(
    frozen_then_moving: Path,
) -> None:
    tracks = TrackSignal()
    tracks.set(True)
    gate = MotionGate.from_config(MotionConfig(enabled=True), tracks)
    frames, source = await _run_source(frozen_then_moving, gate)
    times = _relative(frames)
    assert [t for t in times if t <= 3.0] == [0.0, 1.0, 2.0, 3.0]
    assert source.stats.skipped_no_motion == len(_sample_times(frozen_then_moving)) - len(frames)


@needs_ffmpeg
async def test_a_file_sends_the_same_frames_however_slowly_it_is_answered(
    frozen_then_moving: Path,
) -> None:
    # The first frame's answer makes a track: the frozen stretch after it is then re-read at
    # the stationary interval, whether the answer comes at once or after the decode thread
    # has long reached the next frames (before the gate waited for answers, a slow answer
    # left the track signal unset when the still frames were checked: they were all skipped).
    fast, _ = await _answer_after(frozen_then_moving, 0.0, live_from=1)
    slow, source = await _answer_after(frozen_then_moving, 0.25, live_from=1)
    assert slow == fast
    assert [t for t in slow if t <= 3.0] == [0.0, 1.0, 2.0, 3.0]
    assert source.stats.skipped_no_motion == len(_sample_times(frozen_then_moving)) - len(slow)


def test_wait_answered_waits_for_every_frame_sent() -> None:
    tracks, stop = TrackSignal(), threading.Event()
    assert tracks.wait_answered(stop, 0.01)  # nothing sent: nothing to wait for
    tracks.sent(0)
    tracks.sent(1)
    assert tracks.in_flight == 2
    assert not tracks.wait_answered(stop, 0.05)  # unanswered: timed out
    tracks.done(0)
    assert tracks.in_flight == 1
    answering = threading.Timer(0.05, tracks.done, args=(1,))
    answering.start()
    assert tracks.wait_answered(stop, 5.0)
    answering.join()
    assert tracks.in_flight == 0
    tracks.sent(2)
    stop.set()  # a stopping source does not wait
    assert not tracks.wait_answered(stop, 5.0)


def test_the_gate_settles_only_when_the_track_signal_decides() -> None:
    calls: list[float] = []
    tracks = TrackSignal()
    tracks.set(True)
    gate = _gate(tracks, interval=1.0)
    scene = _scene()

    def decide(t: float, image: np.ndarray = scene) -> str:
        return gate.decide(image, FRAME, t, settle=lambda: calls.append(t))

    assert decide(0.0) == "first"
    assert decide(0.4) == "skip"  # the interval has not passed: the signal is not read
    moved = _with_block(scene, 100, 80)
    assert decide(0.6, moved) == "motion"  # motion: sent without it
    assert calls == []
    assert decide(1.2, moved) == "skip"
    assert decide(1.6, moved) == "stationary"
    assert calls == [1.6]


@needs_ffmpeg
async def test_each_loop_of_a_file_sends_its_first_frame(frozen_then_moving: Path) -> None:
    gate = MotionGate.from_config(MotionConfig(enabled=True))
    frames, _ = await _run_source(frozen_then_moving, gate, loop_file=True)
    starts = [f for f in frames if f.pts_s == frames[0].pts_s]
    assert len(starts) >= 2, _relative(frames)


# --------------------------------------------------------------------------- acceptance

STILL_S = 6.0  # an empty stretch of the yard, held
CLIP_FRAMES = 42  # then the clip's first 2.8 s: the silver car manoeuvres, both plates show


@pytest.fixture(scope="module")
def still_then_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6 s of a still, empty part of the yard (pavement, no vehicle, no plate), then the clip."""
    still_frames = int(STILL_S * FPS)
    graph = (
        "[0:v]split[a][b];"
        "[a]trim=end_frame=1,crop=800:480:600:600,scale=1920:1080,setsar=1,"
        f"loop=loop={still_frames - 1}:size=1:start=0,setpts=N/{FPS}/TB[still];"
        f"[b]trim=end_frame={CLIP_FRAMES},setpts=PTS-STARTPTS,setsar=1[clip];"
        "[still][clip]concat=n=2:v=1:a=0[out]"
    )
    out = tmp_path_factory.mktemp("motion") / "still_then_clip.ts"
    return encode_yard(out, graph)


async def _run_service(
    tmp_path: Path, clip: Path, triton: EmbeddedTriton, gating: bool, regions: bool = False
) -> tuple[list[dict], Service, str]:
    events_file = tmp_path / f"events-{gating}-{regions}.jsonl"
    config = tmp_path / f"motion-{gating}-{regions}.yaml"
    motion = f"{{enabled: {str(gating).lower()}, regions: {str(regions).lower()}}}"
    config.write_text(
        "cameras:\n"
        f"  - name: yard\n    url: '{clip}'\n    sample_fps: 5\n    realtime: false\n"
        f"    motion: {motion}\n"
        # One frame at a time: the same frames give the same reads, run after run.
        f"triton: {{url: '{triton.grpc_url}', max_in_flight_per_camera: 1}}\n"
        f"events: {{stdout: false, file: '{events_file}'}}\n"
        "metrics: {enabled: false}\nweb: {enabled: false}\n"
    )
    service = Service(load_config(config), once=True)
    assert await asyncio.wait_for(service.run(), 600) == 0
    exposition = generate_latest(service.metrics.registry).decode()
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    return events, service, exposition


@needs_ffmpeg
async def test_gating_skips_the_still_stretch_and_gives_the_same_events(
    tmp_path: Path, still_then_clip: Path, triton_server: EmbeddedTriton
) -> None:
    slots = _sample_times(still_then_clip)
    still_slots = [t for t in slots if t < STILL_S - 1e-3]
    assert len(still_slots) == 30

    off, service_off, _ = await _run_service(tmp_path, still_then_clip, triton_server, False)
    on, service_on, exposition = await _run_service(tmp_path, still_then_clip, triton_server, True)

    def summary(events: list[dict]) -> list[tuple]:
        return sorted(
            (
                e["text"],
                e["reads"],
                e["first_seen"]["stream_time_s"],
                e["last_seen"]["stream_time_s"],
            )
            for e in events
        )

    assert off, "no event: the clip part should show plates"
    assert summary(on) == summary(off)

    sent_off = service_off.cameras["yard"].pipeline.stats.sent
    sent_on = service_on.cameras["yard"].pipeline.stats.sent
    skipped = service_on.cameras["yard"].source.stats.skipped_no_motion
    assert sent_off == len(slots)
    assert service_off.cameras["yard"].source.stats.skipped_no_motion == 0
    # Every still frame but the first (always sent) is skipped; the clip's frames all move.
    assert abs(skipped - (len(still_slots) - 1)) <= 2
    assert sent_off - sent_on == skipped
    assert f'lpr_frames_skipped_total{{camera="yard",reason="no_motion"}} {skipped:.1f}' in (
        exposition
    )
    # The passes the detector withheld are exported too, by reason.
    passes = service_on.cameras["yard"].pipeline.passes
    for reason, count in (("duplicate", passes.suppressed), ("low_confidence", passes.unsure)):
        assert (
            f'lpr_passes_withheld_total{{camera="yard",reason="{reason}"}} {count:.1f}'
            in exposition
        )


@needs_ffmpeg
@pytest.mark.parametrize("gating", [True, False])
async def test_detecting_on_regions_gives_the_same_events(
    tmp_path: Path, still_then_clip: Path, triton_server: EmbeddedTriton, gating: bool
) -> None:
    """The service with ``motion.regions`` on (the default) gives the events of whole-frame
    detection, while the frames with vehicles go to the region detector instead of the
    whole-frame one: with the gate on, and off (every frame sent, the motion check only
    placing the regions)."""
    url = triton_server.grpc_url
    whole, _, _ = await _run_service(tmp_path, still_then_clip, triton_server, gating)
    before = inference_counts(url, "detector", "detector_region")
    regions, service, _ = await _run_service(
        tmp_path, still_then_clip, triton_server, gating, regions=True
    )
    after = inference_counts(url, "detector", "detector_region")

    def texts(events: list[dict]) -> list[tuple]:
        return sorted((e["text"], e["first_seen"]["stream_time_s"]) for e in events)

    assert whole, "no event: the clip part should show plates"
    assert texts(regions) == texts(whole)
    sent = service.cameras["yard"].pipeline.stats.sent
    detected_whole = after["detector"] - before["detector"]
    windows = after["detector_region"] - before["detector_region"]
    print(f"{sent} frames sent: {detected_whole} detected whole, {windows} windows")
    # The clip's 14 frames with vehicles: 10 or more on windows alone. (With the gate off, the
    # still stretch's frames, where nothing moves and no track is, are detected whole.)
    clip_frames = CLIP_FRAMES // 3
    assert windows >= 10 and detected_whole <= sent - 10 and sent >= clip_frames
