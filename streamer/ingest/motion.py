"""Motion gating: a still scene's sampled frames are not sent to the detector.

Usage (the service wires this from a camera's ``motion`` config section)::

    gate = MotionGate(MotionDetector(threshold=20, min_area=0.0005, mask=[]),
                      stationary_interval_s=1.0, tracks=TrackSignal())
    # decode thread, per sampled frame, before any BGR conversion
    if gate.check(av_frame, stream_time_s) == "skip":
        ...  # not converted, not queued
    # asyncio side, after each tracker update
    gate.tracks.set(passes.live_tracks > 0)

The check, per sampled frame (never per decoded frame):

1. The frame is shrunk to a small grey image, ``CHECK_WIDTH`` (320) pixels wide, height by the
   frame's aspect (180 for 16:9): the luma plane of an 8-bit YUV frame, read in place and
   area-averaged by OpenCV (other formats: FFmpeg's swscale). A frame that is then skipped
   never pays for the full-size ``bgr24`` conversion.
2. A 5x5 Gaussian blur, then the absolute difference against the *reference*: the latest
   frame that showed motion (the first frame of a session sets it).
3. A pixel has changed when its difference reaches ``threshold`` (grey levels, 0-255). Changed
   pixels inside the ``mask`` polygons (frame pixel coordinates, scaled to the small image: a
   timestamp overlay, trees in the wind) are ignored. The rest is dilated once (3x3), so the
   pieces of one moving object join up.
4. There is motion when one connected changed region covers at least ``min_area`` of the
   frame (a share of the whole image: resolution-independent; 0.0005 is 29 pixels of 320x180).
   A region, not the sum: scattered noise never adds up to motion.

Why the reference is the latest frame *with motion*, not the previous frame, nor a slowly
updated background average as Frigate keeps (``cv2.accumulateWeighted``, alpha 0.01): an
average keeps showing a vehicle that has just stopped (or just left) as motion until it
fades into the background, about 1/alpha checks (some 20 s at 5 checks a second), which would
defeat the stationary re-read below. Against the latest frame with motion, a stop is still at
the next check. Unlike a previous-frame difference, the reference does not follow the scene
while nothing moves, so a slow creep (a car edging forward at a barrier, a few pixels a check)
adds up until it counts, while noise, being random, never adds up. A slow light change adds
up too: it costs one frame sent, and the reference moves on.

The gate, per sampled frame: ``"first"``, the first frame of a session (connect, reconnect,
file loop, stream time going back) is always sent; ``"motion"``: sent; no motion while the
camera has a live track (``TrackSignal``, set by the asyncio side after each tracker update):
``"stationary"``, sent when ``stationary_interval_s`` of stream time have passed since the last
frame sent, so a stopped vehicle is re-read at that interval and its track is ended on time
after it leaves; otherwise ``"skip"``. From a live camera (or a file played in real time) the
track signal lags by the frames in flight: a vehicle that stops right after it appears is
re-read at the next interval once its first result is in. A file played as fast as possible
(``realtime: false``) never runs ahead of its own answers: before such a decision reads the
signal, the decode thread waits until every frame sent has been answered
(:meth:`TrackSignal.wait_answered`), so which frames are sent, and so the events, do not depend
on how fast the machine answers. The wait comes at most once per ``stationary_interval_s`` of a
still stretch; frames with motion are sent without it.

Where it looked (``MotionGate.focus``, with the camera's ``motion.regions``): a frame sent for
motion carries the boxes of the changed regions (in frame pixels), a "stationary" one none of
its own; the camera's pipeline adds its tracks' boxes, and Triton runs the detector on the
regions around them when that is cheaper than the whole frame. The first frame of a session
carries no focus (the whole frame). With ``motion.enabled`` off but ``regions`` on, the gate
skips nothing: a frame without motion is sent as ``"still"``, with its tracks' boxes only.

Measured on ``yard_cam.ts`` (1920x1080 H.264, yuvj420p, 15 fps), on this 2-core machine while
other jobs ran (load 2-4), each part on freshly decoded frames, with
``python -m streamer.ingest.motion ../shared/assets/media/yard_cam.ts``: the check costs 1.1-1.5 ms
a frame; 0.7-1.1 ms of it for the small grey image (swscale's ``reformat(format="gray")``
took 2.3-3.1 ms), 0.2-0.6 ms for blur, difference and regions (the connected-region pass,
0.2-0.3 ms, runs only when enough pixels changed, so still frames skip it). That is about the
``bgr24`` conversion it spares (1.3-3 ms here, noisy), and under 1 % of a detector forward on
these CPUs (about 200 ms). Still noise in that clip is 2-5 grey levels after the blur; the
silver car manoeuvring changes regions of 60-500 pixels at ``threshold`` 20; the timestamp's
seconds digit changes 9-16 pixels, under the 29 of ``min_area`` 0.0005 (two neighbouring
digits changing at once can pass it: mask the timestamp). A 6 s still stretch before the
clip's first 2.8 s (``tests/streamer/ingest/test_motion.py``): 15 frames sent instead of 44,
the same
two events.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import cv2
import numpy as np

from streamer.domain.frames import NO_BOXES

if TYPE_CHECKING:
    from streamer.config import MotionConfig

#: Width in pixels of the grey image the check runs on (height keeps the frame's aspect).
CHECK_WIDTH = 320
_BLUR_KERNEL = (5, 5)
_DILATE_KERNEL = np.ones((3, 3), dtype=np.uint8)
_TIME_TOLERANCE_S = 1e-3  # stream times are float seconds from pts: allow rounding
_STOP_POLL_S = 0.1  # TrackSignal.wait_answered: how often a waiting decode thread checks stop
#: Pixel formats whose first plane is 8-bit luma, one byte a pixel at full resolution.
_LUMA_FIRST_FORMATS = frozenset(
    {
        "gray",
        "nv12",
        "nv16",
        "nv21",
        "yuv410p",
        "yuv411p",
        "yuv420p",
        "yuv422p",
        "yuv440p",
        "yuv444p",
        "yuva420p",
        "yuvj420p",
        "yuvj422p",
        "yuvj440p",
        "yuvj444p",
    }
)

Point = tuple[int, int]
Polygon = Sequence[Point]
#: What the gate did with a frame (see the module docstring); only "skip" is not sent.
GateDecision = Literal["first", "motion", "stationary", "still", "skip"]


def small_gray(frame: Any, width: int = CHECK_WIDTH) -> np.ndarray:
    """A PyAV video frame as a small grey image, ``width`` wide (never upscaled).

    From an 8-bit YUV frame (what H.264/H.265 cameras give), its luma plane is read in place
    and area-averaged by OpenCV: no conversion of the whole frame. Other pixel formats go
    through FFmpeg's swscale to grey (two to three times slower, measured).
    """
    out_width = min(width, frame.width)
    out_height = max(1, round(frame.height * out_width / frame.width))
    if frame.format.name in _LUMA_FIRST_FORMATS:
        plane = frame.planes[0]
        luma = np.frombuffer(plane, dtype=np.uint8).reshape(-1, plane.line_size)
        image: np.ndarray = cv2.resize(
            luma[: frame.height, : frame.width],
            (out_width, out_height),
            interpolation=cv2.INTER_AREA,
        )
        return image
    small = frame.reformat(width=out_width, height=out_height, format="gray", interpolation="AREA")
    image = small.to_ndarray()
    return image


def _frame_boxes(
    stats: np.ndarray, shape: tuple[int, ...], frame_size: tuple[int, int]
) -> np.ndarray:
    """Connected regions' stats (OpenCV's x, y, width, height, area rows, in the small image)
    as x1, y1, x2, y2 boxes in frame pixels."""
    sx, sy = frame_size[0] / shape[1], frame_size[1] / shape[0]
    x, y = stats[:, cv2.CC_STAT_LEFT], stats[:, cv2.CC_STAT_TOP]
    w, h = stats[:, cv2.CC_STAT_WIDTH], stats[:, cv2.CC_STAT_HEIGHT]
    return np.stack([x * sx, y * sy, (x + w) * sx, (y + h) * sy], axis=1).astype(np.float32)


class MotionDetector:
    """Is there motion in this grey image, compared with the latest image that had some?

    ``threshold``: grey levels (1-255) by which a pixel must differ from the reference to
    count as changed. ``min_area``: the smallest connected changed region that is motion, as a
    share of the image (0-1]. ``mask``: polygons, in the *frame's* pixel coordinates, where
    changes are ignored; they are scaled to each image by the ``frame_size`` given with it.
    A polygon partly outside the frame is clipped; wholly outside, it masks nothing.
    """

    def __init__(self, *, threshold: int, min_area: float, mask: Sequence[Polygon]) -> None:
        if not 1 <= threshold <= 255:
            raise ValueError(f"MotionDetector: threshold must be 1-255, got {threshold}")
        if not (math.isfinite(min_area) and 0 < min_area <= 1):
            raise ValueError(f"MotionDetector: min_area must be in (0, 1], got {min_area}")
        polygons = []
        for i, polygon in enumerate(mask):
            points = np.asarray(polygon, dtype=np.float64)
            if points.ndim != 2 or points.shape[1] != 2 or len(points) < 3:
                raise ValueError(
                    f"MotionDetector: mask polygon {i} must be 3 or more [x, y] points, "
                    f"got shape {points.shape}"
                )
            polygons.append(points)
        self.threshold = threshold
        self.min_area = min_area
        self.mask = tuple(polygons)
        #: Share of the image covered by the largest changed region at the latest check (all
        #: changed pixels together when they are under ``min_area``).
        self.last_area = 0.0
        #: The changed regions of at least ``min_area`` at the latest check, as x1, y1, x2, y2
        #: rows in *frame* pixels (float32 [K, 4]; none unless it found motion).
        self.last_boxes = NO_BOXES
        self._reference: np.ndarray | None = None
        self._keep: np.ndarray | None = None  # 255 where changes count, 0 where masked
        self._keep_key: tuple[tuple[int, int], tuple[int, int]] | None = None

    def reset(self) -> None:
        """Forget the reference: the next image starts afresh (and counts as motion)."""
        self._reference = None
        self.last_area = 0.0
        self.last_boxes = NO_BOXES

    def update(self, gray: np.ndarray, frame_size: tuple[int, int]) -> bool:
        """Check ``gray`` (uint8, HxW) of a frame ``frame_size`` = (width, height) in pixels.

        With no reference yet (first image, after :meth:`reset`, or a new image size) the
        image becomes the reference and the answer is True: unknown counts as motion.
        """
        if gray.dtype != np.uint8 or gray.ndim != 2:
            raise ValueError(
                f"MotionDetector: expected a 2-D uint8 grey image, got {gray.dtype} {gray.shape}"
            )
        blurred = cv2.GaussianBlur(gray, _BLUR_KERNEL, 0)
        reference = self._reference
        self.last_boxes = NO_BOXES
        if reference is None or reference.shape != blurred.shape:
            self._reference = blurred
            self.last_area = 1.0
            return True
        diff = cv2.absdiff(blurred, reference)
        _, changed = cv2.threshold(diff, self.threshold - 1, 255, cv2.THRESH_BINARY)
        keep = self._keep_mask(blurred.shape, frame_size)
        if keep is not None:
            changed = cv2.bitwise_and(changed, keep)
        changed = cv2.dilate(changed, _DILATE_KERNEL)
        largest = cv2.countNonZero(changed)
        regions = np.zeros((0, 5), np.int32)
        if largest / changed.size >= self.min_area:  # else no region can be large enough
            # The costly part (0.2-0.3 ms at 320x180), so a still scene skips it.
            count, _, stats, _ = cv2.connectedComponentsWithStats(changed, connectivity=8)
            regions = stats[1:]
            largest = int(regions[:, cv2.CC_STAT_AREA].max()) if count > 1 else 0
        self.last_area = largest / changed.size
        moving = self.last_area >= self.min_area
        if moving:  # (so the regions were measured)
            self._reference = blurred
            self.last_boxes = _frame_boxes(
                regions[regions[:, cv2.CC_STAT_AREA] >= self.min_area * changed.size],
                changed.shape,
                frame_size,
            )
        return moving

    def _keep_mask(self, shape: tuple[int, ...], frame_size: tuple[int, int]) -> np.ndarray | None:
        if not self.mask:
            return None
        height, width = shape[0], shape[1]
        key = ((width, height), (int(frame_size[0]), int(frame_size[1])))
        if self._keep is None or key != self._keep_key:
            frame_width, frame_height = key[1]
            if frame_width <= 0 or frame_height <= 0:
                raise ValueError(f"MotionDetector: bad frame size {frame_size}")
            scale = np.array([width / frame_width, height / frame_height])
            keep = np.full((height, width), 255, dtype=np.uint8)
            polygons = [np.round(p * scale).astype(np.int32) for p in self.mask]
            cv2.fillPoly(keep, polygons, 0)
            self._keep, self._keep_key = keep, key
        return self._keep


class TrackSignal:
    """Whether a camera has a live track: set on the asyncio side, read by the decode thread.

    It also counts the frames in flight, for a file played as fast as possible
    (``realtime: false``): the decode thread says which frame it queued (:meth:`sent`), the
    pipeline which frame's answer the tracker has taken or given up on (:meth:`done`), and
    :meth:`wait_answered` waits until every frame sent has been answered, so the gate's "a
    track lives" is then the tracker's state after exactly the frames before this one.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._live = False
        self._sent = -1  # index of the latest frame queued for recognition
        self._done = -1  # index of the latest frame answered (or given up)

    def set(self, live: bool) -> None:
        with self._changed:
            self._live = live

    @property
    def live(self) -> bool:
        return self._live

    def sent(self, index: int) -> None:
        """The decode thread queued frame ``index`` (indices count up, per camera)."""
        with self._changed:
            self._sent = max(self._sent, index)

    def done(self, index: int) -> None:
        """The tracker took frame ``index``'s answer, or the frame was given up (a failed
        request, a pipeline restart); after :meth:`set` for that frame."""
        with self._changed:
            if index > self._done:
                self._done = index
                self._changed.notify_all()

    @property
    def in_flight(self) -> int:
        """Frames sent and not yet answered."""
        return max(0, self._sent - self._done)

    def wait_answered(self, stop: threading.Event, timeout_s: float) -> bool:
        """Until every frame sent is answered (True), ``stop`` is set or ``timeout_s`` pass
        (False). Polls ``stop`` every ``_STOP_POLL_S``: the decode thread's stop event is a
        plain ``threading.Event``."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._done < self._sent:
                left = deadline - time.monotonic()
                if left <= 0 or stop.is_set():
                    return False
                self._changed.wait(min(left, _STOP_POLL_S))
            return True


class MotionGate:
    """Decides, per sampled frame of one camera, whether it is sent (see the module docstring).

    Used by one decode thread at a time; only :attr:`tracks` is shared with other threads.
    """

    def __init__(
        self,
        detector: MotionDetector,
        *,
        stationary_interval_s: float,
        tracks: TrackSignal,
        check_width: int = CHECK_WIDTH,
        regions: bool = False,
        skips: bool = True,
    ) -> None:
        if not (math.isfinite(stationary_interval_s) and stationary_interval_s > 0):
            raise ValueError(
                f"MotionGate: stationary_interval_s must be > 0, got {stationary_interval_s}"
            )
        if check_width < 1:
            raise ValueError(f"MotionGate: check_width must be >= 1, got {check_width}")
        self.detector = detector
        self.stationary_interval_s = stationary_interval_s
        self.tracks = tracks
        self.check_width = check_width
        self.regions = regions  # whether frames sent carry their focus (see :meth:`focus`)
        #: False: nothing is skipped (gating off), the gate only says where motion is; a
        #: frame without any is sent as "still".
        self.skips = skips
        self._last_sent_t: float | None = None

    @classmethod
    def from_config(cls, config: MotionConfig, tracks: TrackSignal | None = None) -> MotionGate:
        """A gate for a camera's ``motion`` config section: it skips still frames if
        ``enabled``; with only ``regions`` on, it sends every frame with its focus."""
        detector = MotionDetector(
            threshold=config.threshold, min_area=config.min_area, mask=config.mask
        )
        return cls(
            detector,
            stationary_interval_s=config.stationary_interval_s,
            tracks=tracks if tracks is not None else TrackSignal(),
            regions=config.regions,
            skips=config.enabled,
        )

    def reset(self) -> None:
        """A new session (connect, reconnect, file loop): its first frame is sent."""
        self._last_sent_t = None
        self.detector.reset()

    def check(self, frame: Any, t: float, settle: Callable[[], None] | None = None) -> GateDecision:
        """The decision for a PyAV video frame at stream time ``t`` (seconds)."""
        size = (frame.width, frame.height)
        return self.decide(small_gray(frame, self.check_width), size, t, settle)

    def decide(
        self,
        gray: np.ndarray,
        frame_size: tuple[int, int],
        t: float,
        settle: Callable[[], None] | None = None,
    ) -> GateDecision:
        """The decision for a frame given as its small grey image (see :func:`small_gray`).

        ``settle``: called before the decision reads :attr:`tracks` (only then: a still frame
        whose stationary interval has passed); a file played as fast as possible waits there
        for the answers to the frames already sent (:meth:`TrackSignal.wait_answered`).
        """
        last = self._last_sent_t
        decision: GateDecision
        if last is None or t < last - _TIME_TOLERANCE_S:
            # The first frame, or time went back (a splice): a new stretch, as on reconnect.
            self.detector.reset()
            self.detector.update(gray, frame_size)
            decision = "first"
        elif self.detector.update(gray, frame_size):
            decision = "motion"
        elif not self.skips:
            decision = "still"
        elif t - last >= self.stationary_interval_s - _TIME_TOLERANCE_S and self._live(settle):
            decision = "stationary"
        else:
            return "skip"
        self._last_sent_t = t
        return decision

    def focus(self, decision: GateDecision) -> np.ndarray | None:
        """Where plates can be in the frame just decided (``Frame.focus``): what moved, for a
        "motion" frame; nothing yet for a "stationary" or "still" one (the live plates are
        added where they are known, streamer/pipeline/camera.py; with none, the whole frame);
        None, anywhere, for the first frame of a session or with ``regions`` off."""
        if not self.regions or decision in ("first", "skip"):
            return None
        if decision in ("stationary", "still"):
            return NO_BOXES
        return self.detector.last_boxes

    def _live(self, settle: Callable[[], None] | None) -> bool:
        if settle is not None:
            settle()
        return self.tracks.live


def measure(path: str, width: int = CHECK_WIDTH) -> dict[str, float]:
    """Milliseconds per frame, each on a freshly decoded frame of the file at ``path``:
    the check (small grey image, then detector) in one decode pass, ``bgr24`` in another."""
    import av

    detector = MotionDetector(threshold=20, min_area=0.0005, mask=[[(0, 0), (600, 0), (0, 60)]])
    gray_s = detect_s = bgr_s = 0.0
    frames = 0
    with av.open(path) as container:
        container.streams.video[0].thread_type = "AUTO"  # as CameraSource decodes files
        for frame in container.decode(video=0):
            started = time.perf_counter()
            gray = small_gray(frame, width)
            scaled = time.perf_counter()
            detector.update(gray, (frame.width, frame.height))
            detect_s += time.perf_counter() - scaled
            gray_s += scaled - started
            frames += 1
    with av.open(path) as container:
        container.streams.video[0].thread_type = "AUTO"
        for frame in container.decode(video=0):
            started = time.perf_counter()
            frame.to_ndarray(format="bgr24")
            bgr_s += time.perf_counter() - started
    return {
        "small_gray_ms": 1000 * gray_s / frames,
        "detector_ms": 1000 * detect_s / frames,
        "check_ms": 1000 * (gray_s + detect_s) / frames,
        "bgr24_ms": 1000 * bgr_s / frames,
    }


if __name__ == "__main__":
    import sys

    for name, value in measure(sys.argv[1]).items():
        print(f"{name}: {value:.2f}")
