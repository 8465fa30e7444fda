"""One camera: PyAV decoding in a dedicated thread, sampled frames into a :class:`FrameQueue`.

Usage::

    queue = FrameQueue(maxsize=2, policy="drop_oldest")
    source = CameraSource("gate", "rtsp://user:pw@10.0.0.5/stream1", sample_fps=5,
                          realtime=False, loop_file=False, queue=queue)
    source.start()
    while (frame := await queue.get()) is not None:
        ...
    await source.astop()

Live sources (``rtsp``, ``http``, ``udp``, ... URLs) are reconnected for ever, with capped
exponential backoff and full jitter, until :meth:`CameraSource.stop`; files end (or loop).
The thread never raises: failures are counted in :class:`CameraStats`, logged once per state
change, with the password redacted.

What PyAV 18 (FFmpeg 8) does here, measured against a GStreamer RTSP server:

* A server that dies: no exception, the demuxer simply ends (a disconnect for a live source).
  Opening a closed port: ``av.error.ConnectionRefusedError`` at once.
* A server that hangs (SIGSTOP): with no timeout the read blocks for ever. Both FFmpeg's
  socket ``timeout`` option (microseconds; ``av.error.TimeoutError``) and PyAV's
  ``av.open(timeout=(open_s, read_s))`` (an FFmpeg interrupt callback, restarted before each
  packet read; ``av.error.ExitError``) end it, each after about *twice* its value. Both are
  set; the first to fire wins.
* ``container.close()`` from another thread while the decode thread is inside
  ``av_read_frame`` does not unblock it (the read stays blocked) and frees the context under
  it: unsafe. PyAV 18 exposes no user interrupt callback either. So the stall watchdog here
  (a) sets a flag that the decode loop checks before each packet (this catches streams whose
  packets flow but never decode to a picture), and (b) if the decode thread still has not come
  back after another ``stall_timeout_s`` (stuck inside FFmpeg despite the timeouts), abandons
  it: a fresh decode thread reconnects, and the old one exits without touching the queue
  whenever FFmpeg lets it go.
* The first frame of an RTSP session may have ``pts=None`` (the sampler then extrapolates).
* The H.264 decoder conceals most damage silently: a corrupt packet raises nothing. Damage is
  counted from ``packet.is_corrupt`` (demuxer), ``frame.is_corrupt`` (concealed frames, still
  delivered) and exceptions from ``packet.decode()`` (that packet is skipped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

import av
import av.error

from streamer.domain.frames import Frame
from streamer.ingest.frame_queue import FrameQueue
from streamer.ingest.motion import MotionGate
from streamer.ops.redact import redact_text, redact_url, secrets_of, url_scheme

_LOG = logging.getLogger(__name__)

CameraState = Literal["starting", "connected", "reconnecting", "ended", "stopped"]

LIVE_SCHEMES = frozenset(
    {"rtsp", "rtsps", "rtmp", "rtmps", "http", "https", "udp", "tcp", "srt", "rtp"}
)
# Schemes whose FFmpeg protocol reads option ``timeout`` as a socket I/O timeout in µs.
_SOCKET_TIMEOUT_SCHEMES = frozenset({"rtsp", "rtsps", "http", "https", "udp", "tcp", "srt"})
_US_PER_S = 1_000_000
_DEFAULT_RATE = 25.0  # frames per second assumed when a stream declares none
_FPS_WINDOW_S = 0.5  # decode-rate window; the EMA is over windows
_FPS_EMA_ALPHA = 0.5
_BACKOFF_RESET_AFTER_S = 5.0  # a session that delivered frames this long resets the backoff
_MIN_RETRY_DELAY_S = 0.05
_MAX_FILE_READ_ERRORS = 50  # consecutive demuxer errors in a file before it counts as ended
_PACE_MAX_AHEAD_S = 5.0  # realtime pacing: a pts jump further ahead re-anchors the clock
_PACE_MAX_BEHIND_S = 1.0  # realtime pacing: this far behind, re-anchor instead of bursting
_WATCHDOG_MAX_INTERVAL_S = 1.0
#: How often a frame skipped by the motion gate is still converted for the live view.
PREVIEW_INTERVAL_S = 1.0
# Non-reference frames are skipped when the stream has at least this many frames per sampled
# one, and decoded again when what remains comes slower than sample_fps x the margin.
_SKIP_MIN_RATIO = 2.0
_SKIP_CHECK_S = 2.0
_SKIP_RATE_MARGIN = 1.2


@dataclass(slots=True)
class CameraStats:
    """Counters of one :class:`CameraSource`, updated by its decode thread.

    ``decoded``: frames out of the decoder; ``sampled``: frames kept by the sampler and queued;
    ``skipped_no_motion``: frames kept by the sampler that the motion gate held back (no
    motion and no live track, or a live track re-read less often): never converted or queued;
    ``dropped``: the queue's count of frames evicted unread (one queue per camera);
    ``decode_errors``: packets the demuxer flagged corrupt, packets the decoder rejected
    (skipped), frames the decoder concealed (delivered) and unreadable stretches of a file;
    ``reconnects``: connection attempts after a failure or a disconnect;
    ``skipping_non_reference``: whether the current session skips non-reference frames;
    ``last_error``: the
    latest failure (credentials redacted); ``fps``: decode rate, an EMA over 0.5 s windows.
    """

    decoded: int = 0
    sampled: int = 0
    skipped_no_motion: int = 0
    dropped: int = 0
    decode_errors: int = 0
    reconnects: int = 0
    skipping_non_reference: bool = False
    last_error: str | None = None
    state: CameraState = "starting"
    fps: float = 0.0


@dataclass(slots=True)
class _Session:
    """Per-connection (or per pass over a file) state of the decode loop."""

    stream: Any
    rate: float
    started: float
    frames: int = 0
    last_t: float | None = None
    next_slot: float | None = None
    pace_anchor: tuple[float, float] | None = None  # (pts_s, monotonic)
    #: Skipping non-reference frames: the stream time it started at and frames since.
    skip_since: tuple[float, int] | None = None


class CameraSource:
    """One camera (or file) decoded by PyAV in a named thread, sampled into a queue.

    Sampling: a frame is kept when its stream time (``pts * time_base``; extrapolated from
    the previous frame at the stream rate when ``pts`` is missing) reaches the next slot of
    ``1 / sample_fps``; the first frame is always kept, and the slots restart when the stream
    time jumps back (reconnect, file loop). Kept frames are queued as decoded; each is converted
    to BGR only when something uses its image (``Frame.image``: the frames sent to Triton).

    ``motion_gate`` (optional; None sends every kept frame): after sampling and pacing, before
    the BGR conversion, the gate decides from a small grey image whether the frame is sent
    (streamer/ingest/motion.py); it is reset at each connect and file loop, so the first frame of a
    session is always sent. Skipped frames are counted in ``stats.skipped_no_motion``.

    ``skip_non_reference``: when the stream has at least twice ``sample_fps``, frames that no
    other frame refers to (B-frames) are not decoded at all (FFmpeg's ``skip_frame`` NONREF:
    on the yard clip, 62 of 120 frames decoded, 40 % less decode CPU); if the reference frames
    alone then come slower than 1.2 x ``sample_fps`` (measured over the first 2 s of stream
    time), the session goes back to decoding every frame.

    ``realtime`` paces a *file* by its timestamps (live sources pace themselves);
    ``loop_file`` replays a file for ever instead of ending. A file that cannot be opened ends
    the source (state ``"ended"``, ``last_error`` set, queue closed) unless ``loop_file``,
    where it is retried like a live source. Frames' ``index`` counts up across reconnects and
    loops. The queue is closed whenever the source ends or stops.
    """

    def __init__(
        self,
        name: str,
        url: str,
        *,
        sample_fps: float,
        realtime: bool,
        loop_file: bool,
        queue: FrameQueue,
        rtsp_transport: str = "tcp",
        open_timeout_s: float = 5.0,
        read_timeout_s: float = 5.0,
        stall_timeout_s: float = 10.0,
        reconnect_initial_delay_s: float = 0.5,
        reconnect_max_delay_s: float = 30.0,
        redacted_url: str | None = None,
        motion_gate: MotionGate | None = None,
        skip_non_reference: bool = False,
    ) -> None:
        if not name:
            raise ValueError("CameraSource: name must not be empty")
        if not sample_fps > 0:
            raise ValueError(f"CameraSource {name}: sample_fps must be > 0, got {sample_fps}")
        for label, value in (
            ("open_timeout_s", open_timeout_s),
            ("read_timeout_s", read_timeout_s),
            ("stall_timeout_s", stall_timeout_s),
            ("reconnect_initial_delay_s", reconnect_initial_delay_s),
        ):
            if not value > 0:
                raise ValueError(f"CameraSource {name}: {label} must be > 0, got {value}")
        if reconnect_max_delay_s < reconnect_initial_delay_s:
            raise ValueError(
                f"CameraSource {name}: reconnect_max_delay_s ({reconnect_max_delay_s}) must be "
                f">= reconnect_initial_delay_s ({reconnect_initial_delay_s})"
            )
        self.name = name
        self._url = url
        self.redacted_url = redacted_url if redacted_url is not None else redact_url(url)
        self._secrets = secrets_of(url)
        self.live = url_scheme(url) in LIVE_SCHEMES
        self.sample_fps = float(sample_fps)
        self.realtime = realtime
        self.loop_file = loop_file
        self.queue = queue
        self.rtsp_transport = rtsp_transport
        self.open_timeout_s = open_timeout_s
        self.read_timeout_s = read_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.reconnect_initial_delay_s = reconnect_initial_delay_s
        self.reconnect_max_delay_s = reconnect_max_delay_s
        self.motion_gate = motion_gate
        self.skip_non_reference = skip_non_reference
        #: The latest frame the motion gate skipped, kept for the live view (not recognised).
        self.latest_preview: Frame | None = None
        self.stats = CameraStats()

        self._period = 1.0 / self.sample_fps
        self._slot_tolerance = min(1e-3, self._period / 10)
        self._stop = threading.Event()
        self._lock = threading.Lock()  # state, generation, stall bookkeeping, frame index
        self._stop_lock = threading.Lock()
        self._rng = random.Random()
        self._generation = 0  # bumped when the watchdog abandons a stuck decode thread
        self._thread: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        self._started = False
        self._next_index = 0
        self._last_progress = time.monotonic()
        self._waiting = False  # in a queue put or a pacing sleep: not a stall
        self._stall_since: float | None = None
        self._fps_window = (time.monotonic(), 0)

    def __repr__(self) -> str:
        return f"CameraSource({self.name!r}, {self.redacted_url!r}, state={self.stats.state!r})"

    # -- lifecycle

    @property
    def state(self) -> CameraState:
        return self.stats.state

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the decode thread (and its watchdog). A second call does nothing."""
        with self._stop_lock:
            if self._stop.is_set():
                raise RuntimeError(f"camera {self.name}: stopped; create a new CameraSource")
            if self._started:
                return
            self._started = True
            self._spawn_decoder(self._generation)
            self._watchdog = threading.Thread(
                target=self._watch, name=f"ingest-{self.name}-watchdog", daemon=True
            )
            self._watchdog.start()

    def _spawn_decoder(self, generation: int) -> None:
        suffix = f"-{generation}" if generation else ""
        self._thread = threading.Thread(
            target=self._run,
            args=(generation,),
            name=f"ingest-{self.name}{suffix}",
            daemon=True,  # a thread stuck inside FFmpeg must not block interpreter exit
        )
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop decoding, unblock the queue, join the thread; close the queue. Idempotent.

        ``timeout_s`` bounds the join (default: enough for FFmpeg's timeouts to fire); a
        thread still stuck inside FFmpeg after it is abandoned (it is a daemon thread).
        """
        with self._stop_lock:
            self._stop.set()
            self.queue.wake_producers()
            if timeout_s is None:
                timeout_s = max(self.open_timeout_s, 2 * self.read_timeout_s) + 1.0
            deadline = time.monotonic() + timeout_s
            for thread in (self._thread, self._watchdog):
                if thread is not None and thread is not threading.current_thread():
                    thread.join(max(0.0, deadline - time.monotonic()))
            if self._thread is not None and self._thread.is_alive():
                _LOG.warning(
                    "camera %s: decode thread did not stop within %.1f s (stuck in FFmpeg); "
                    "abandoning it",
                    self.name,
                    timeout_s,
                )
                with self._lock:
                    self._generation += 1
            self.queue.close()
            with self._lock:
                if self.stats.state != "ended":
                    self._set_state_locked("stopped")

    async def astop(self, timeout_s: float | None = None) -> None:
        """:meth:`stop` without blocking the event loop."""
        await asyncio.to_thread(self.stop, timeout_s)

    # -- helpers

    def _current(self, generation: int) -> bool:
        return generation == self._generation and not self._stop.is_set()

    def _redact(self, text: str) -> str:
        return redact_text(text.replace(self._url, self.redacted_url), self._secrets)

    def _error_text(self, exc: BaseException) -> str:
        return self._redact(f"{type(exc).__name__}: {exc}")

    def _set_state_locked(self, state: CameraState) -> bool:
        if self.stats.state == state:
            return False
        self.stats.state = state
        return True

    def _backoff(self, attempt: int) -> float:
        """Full jitter: uniform in [0, min(max, initial * 2**attempt)]."""
        cap = min(self.reconnect_max_delay_s, self.reconnect_initial_delay_s * 2.0**attempt)
        return max(_MIN_RETRY_DELAY_S, self._rng.uniform(0.0, cap))

    def _open_options(self) -> dict[str, str]:
        scheme = url_scheme(self._url)
        options: dict[str, str] = {}
        if scheme in ("rtsp", "rtsps"):
            options.update(rtsp_transport=self.rtsp_transport, analyzeduration="0", probesize="32")
        if scheme in _SOCKET_TIMEOUT_SCHEMES:
            options["timeout"] = str(int(self.read_timeout_s * _US_PER_S))
        return options

    def _open(self) -> tuple[Any, Any]:
        """Open the container and pick its first video stream."""
        if self.live:
            container = av.open(
                self._url,
                options=self._open_options(),
                timeout=(self.open_timeout_s, self.read_timeout_s),
            )
        else:
            container = av.open(self._url, timeout=(self.open_timeout_s, self.read_timeout_s))
        try:
            if not container.streams.video:
                raise ValueError("no video stream")
            stream = container.streams.video[0]
            if not self.live:
                stream.thread_type = "AUTO"  # files: throughput; live: no frame-thread delay
            return container, stream
        except BaseException:
            container.close()
            raise

    # -- the decode thread

    def _run(self, generation: int) -> None:
        try:
            while self._current(generation):
                try:
                    self._loop(generation)
                    break
                except Exception as exc:  # a bug, not a camera failure: log it, carry on
                    error = self._error_text(exc)
                    _LOG.exception("camera %s: decode thread failed: %s", self.name, error)
                    with self._lock:
                        self.stats.last_error = error
                    if not (self.live or self.loop_file):
                        break
                    if self._stop.wait(self.reconnect_max_delay_s):
                        break
        except BaseException as exc:  # never raise out of the thread
            _LOG.error("camera %s: decode thread failed: %s", self.name, self._error_text(exc))
        finally:
            with self._lock:
                current = generation == self._generation
                if current and self._stop.is_set() and self.stats.state != "ended":
                    if self._set_state_locked("stopped"):
                        _LOG.info("camera %s: stopped", self.name)
                elif current and self.stats.state != "stopped":
                    self._set_state_locked("ended")
            if current:
                self.queue.close()

    def _loop(self, generation: int) -> None:
        attempt = 0  # backoff exponent
        retrying = generation > 0  # a replacement thread starts by reconnecting
        while self._current(generation):
            if retrying:
                with self._lock:
                    self.stats.reconnects += 1
            try:
                container, stream = self._open()
            except Exception as exc:
                open_error = self._error_text(exc)
                if not self.live and not self.loop_file:
                    self._end(f"cannot open: {open_error}", open_error)
                    return
                delay = self._backoff(attempt)
                attempt += 1
                self._lost(generation, open_error, delay, opening=True)
                if self._stop.wait(delay):
                    return
                retrying = True
                continue

            session: _Session | None = None
            error: str | None = None
            try:
                session = self._connected(generation, stream)
                outcome, error = self._decode(generation, container, session)
            except Exception as exc:
                outcome, error = "error", self._error_text(exc)
            finally:
                with contextlib.suppress(Exception):
                    container.close()
            if not self._current(generation):
                return
            with self._lock:
                self._stall_since = None  # acknowledged
            frames = session.frames if session is not None else 0
            lasted = time.monotonic() - session.started if session is not None else 0.0
            if frames and lasted >= _BACKOFF_RESET_AFTER_S:
                attempt = 0

            if not self.live and outcome == "eof" and frames:
                if self.loop_file:
                    _LOG.debug("camera %s: end of file, looping", self.name)
                    retrying = False
                    continue
                self._end("end of file", None)
                return
            if not self.live and not self.loop_file:
                self._end(
                    "end of file" if error is None else f"read failed: {error}",
                    error or ("no frames decoded" if not frames else None),
                )
                return
            if error is None:
                error = "no frames decoded" if not frames else "stream ended"
            delay = self._backoff(attempt)
            attempt += 1
            self._lost(generation, error, delay, opening=False)
            if self._stop.wait(delay):
                return
            retrying = True

    def _connected(self, generation: int, stream: Any) -> _Session:
        rate_q = stream.average_rate or stream.guessed_rate or stream.base_rate
        rate = float(rate_q) if rate_q else _DEFAULT_RATE
        now = time.monotonic()
        with self._lock:
            self._last_progress = now
            self._stall_since = None
            self._fps_window = (now, 0)
            changed = generation == self._generation and self._set_state_locked("connected")
        if self.motion_gate is not None:
            self.motion_gate.reset()  # the first frame of a session is always sent
        if changed:
            ctx = stream.codec_context
            _LOG.info(
                "camera %s: connected to %s (%sx%s, %s fps, %s)",
                self.name,
                self.redacted_url,
                ctx.width,
                ctx.height,
                f"{float(rate_q):.2f}" if rate_q else "?",
                ctx.name,
            )
        session = _Session(stream=stream, rate=rate, started=now)
        if self.skip_non_reference and self.sample_fps * _SKIP_MIN_RATIO <= rate:
            # Frames no other frame refers to (B-frames, mostly) are not decoded at all.
            stream.codec_context.skip_frame = "NONREF"
            session.skip_since = (-math.inf, 0)
        with self._lock:
            self.stats.skipping_non_reference = session.skip_since is not None
        return session

    def _lost(self, generation: int, error: str, delay: float, *, opening: bool) -> None:
        with self._lock:
            if generation != self._generation:
                return
            self.stats.last_error = error
            previous = self.stats.state
            changed = self._set_state_locked("reconnecting")
        if not changed:
            _LOG.debug(
                "camera %s: %s still failing (%s); retrying in %.1f s",
                self.name,
                self.redacted_url,
                error,
                delay,
            )
        elif opening and previous == "starting":
            _LOG.warning(
                "camera %s: cannot open %s (%s); retrying in %.1f s",
                self.name,
                self.redacted_url,
                error,
                delay,
            )
        else:
            _LOG.warning(
                "camera %s: lost %s (%s); reconnecting in %.1f s",
                self.name,
                self.redacted_url,
                error,
                delay,
            )

    def _end(self, reason: str, error: str | None) -> None:
        with self._lock:
            if error is not None:
                self.stats.last_error = error
            changed = self._set_state_locked("ended")
        if changed:
            log = _LOG.error if error is not None and self.stats.decoded == 0 else _LOG.info
            log(
                "camera %s: ended, %s (%s; %d frames decoded)",
                self.name,
                self.redacted_url,
                reason,
                self.stats.decoded,
            )
        self.queue.close()

    def _decode(self, generation: int, container: Any, session: _Session) -> tuple[str, str | None]:
        """Demux and decode one session: ``(outcome, error)``, outcome "eof"|"error"|...

        Packet by packet, so that one bad packet costs that packet only.
        """
        stream = session.stream
        packets = container.demux(stream)
        read_errors = 0
        try:
            while True:
                if not self._current(generation):
                    return "stopped", None
                if self._stall_since is not None:
                    return "stalled", f"no frame decoded for {self.stall_timeout_s:.1f} s"
                try:
                    packet = next(packets)
                except StopIteration:
                    return "eof", None
                except av.error.FFmpegError as exc:
                    if self.live:
                        return "error", self._error_text(exc)
                    # A file: count it, read on from where the demuxer stands.
                    read_errors += 1
                    self._count_error(generation, exc, "read")
                    if read_errors > _MAX_FILE_READ_ERRORS:
                        return "eof", None
                    packets.close()
                    packets = container.demux(stream)
                    continue
                read_errors = 0
                if packet.is_corrupt:
                    with self._lock:
                        self.stats.decode_errors += 1
                try:
                    frames = packet.decode()
                except (av.error.FFmpegError, ValueError) as exc:
                    self._count_error(generation, exc, "decode")
                    continue
                for frame in frames:
                    if not self._current(generation):
                        return "stopped", None
                    self._on_frame(generation, session, frame)
        finally:
            packets.close()

    def _count_error(self, generation: int, exc: BaseException, what: str) -> None:
        with self._lock:
            if generation != self._generation:
                return
            self.stats.decode_errors += 1
            count = self.stats.decode_errors
        _LOG.debug("camera %s: %s error #%d: %s", self.name, what, count, self._error_text(exc))

    def _on_frame(self, generation: int, session: _Session, frame: Any) -> None:
        now = time.monotonic()
        session.frames += 1
        with self._lock:
            self.stats.decoded += 1
            if frame.is_corrupt:
                self.stats.decode_errors += 1
            self._last_progress = now
        self._update_fps(now)

        t = self._stream_time(session, frame)
        if session.skip_since is not None:
            self._check_reference_rate(session, t)
        if not self._keep(session, t):
            return
        if self.realtime and not self.live:
            self._pace(session, t)
            if not self._current(generation):
                return
        if self.motion_gate is not None and self.motion_gate.check(frame, t) == "skip":
            with self._lock:
                if generation == self._generation:
                    self.stats.skipped_no_motion += 1
            self._keep_preview(generation, frame, t)
            return
        wall_time, monotonic = time.time(), time.monotonic()
        with self._lock:
            if generation != self._generation:
                return
            index = self._next_index
            self._next_index += 1
        item = Frame(
            camera=self.name,
            index=index,
            pts_s=t,
            wall_time=wall_time,
            monotonic=monotonic,
            pixels=frame,  # converted to BGR only if it is sent (Frame.image)
        )
        self._waiting = True
        try:
            queued = self.queue.put_threadsafe(item, self._stop)
        finally:
            self._waiting = False
        with self._lock:
            self._last_progress = time.monotonic()
            if queued:
                self.stats.sampled += 1
            self.stats.dropped = self.queue.dropped

    def _check_reference_rate(self, session: _Session, t: float) -> None:
        """Stop skipping non-reference frames when the rest come slower than ``sample_fps``.

        A stream's reference frames (I and P) may be too sparse to sample from (say, three
        B-frames between P-frames at 15 fps leaves 3.75 fps): measured over the first
        ``_SKIP_CHECK_S`` of stream time, with a margin, and decided once per session.
        """
        assert session.skip_since is not None
        since, frames = session.skip_since
        if since == -math.inf:
            session.skip_since = (t, 0)
            return
        frames += 1
        if t - since < _SKIP_CHECK_S:
            session.skip_since = (since, frames)
            return
        rate = frames / (t - since)
        if rate < self.sample_fps * _SKIP_RATE_MARGIN:
            session.stream.codec_context.skip_frame = "DEFAULT"
            with self._lock:
                self.stats.skipping_non_reference = False
            _LOG.info(
                "camera %s: reference frames come at %.1f fps, under sample_fps %.4g: "
                "decoding every frame",
                self.name,
                rate,
                self.sample_fps,
            )
        session.skip_since = None  # decided for this session

    def _keep_preview(self, generation: int, frame: Any, t: float) -> None:
        """A gated frame for the live view, at most every ``PREVIEW_INTERVAL_S``.

        The live view draws the latest recognised frame; while a still scene is gated that
        frame would stand still (a timestamp overlay included). So a skipped frame is still
        converted now and then (about 3 ms a 1080p frame, once a second) for it to show.
        """
        now = time.monotonic()
        previous = self.latest_preview
        if previous is not None and now - previous.monotonic < PREVIEW_INTERVAL_S:
            return
        image = frame.to_ndarray(format="bgr24")
        with self._lock:
            if generation != self._generation:
                return
            index = self._next_index  # not taken: the sent frames' indices stay consecutive
        self.latest_preview = Frame(self.name, index, t, time.time(), now, image)

    def _stream_time(self, session: _Session, frame: Any) -> float:
        if frame.pts is not None and frame.time_base is not None:
            t = float(frame.pts * frame.time_base)
        elif session.last_t is not None:
            t = session.last_t + 1.0 / session.rate
        else:
            t = (session.frames - 1) / session.rate
        if session.last_t is not None and t + self._slot_tolerance < session.last_t:
            session.next_slot = None  # time went back (wrap, splice): restart the slots
            session.pace_anchor = None
        session.last_t = t
        return t

    def _keep(self, session: _Session, t: float) -> bool:
        if session.next_slot is not None and t < session.next_slot - self._slot_tolerance:
            return False
        slot = t if session.next_slot is None else session.next_slot
        session.next_slot = slot + self._period
        if session.next_slot <= t:  # a gap in the stream: do not burst to catch up
            session.next_slot = t + self._period
        return True

    def _pace(self, session: _Session, t: float) -> None:
        now = time.monotonic()
        if session.pace_anchor is None:
            session.pace_anchor = (t, now)
            return
        anchor_t, anchor_mono = session.pace_anchor
        delay = anchor_mono + (t - anchor_t) - now
        if delay > _PACE_MAX_AHEAD_S or delay < -_PACE_MAX_BEHIND_S:
            session.pace_anchor = (t, now)
            return
        if delay > 0:
            self._waiting = True
            try:
                self._stop.wait(delay)
            finally:
                self._waiting = False

    def _update_fps(self, now: float) -> None:
        start, count = self._fps_window
        count += 1
        elapsed = now - start
        if elapsed >= _FPS_WINDOW_S:
            rate = count / elapsed
            fps = self.stats.fps
            self.stats.fps = (
                rate if fps == 0.0 else _FPS_EMA_ALPHA * rate + (1 - _FPS_EMA_ALPHA) * fps
            )
            self._fps_window = (now, 0)
        else:
            self._fps_window = (start, count)

    # -- the watchdog thread

    def _watch(self) -> None:
        interval = min(_WATCHDOG_MAX_INTERVAL_S, self.stall_timeout_s / 4)
        while not self._stop.wait(interval):
            try:
                self._check_stall()
            except Exception:  # never let the watchdog die
                _LOG.exception("camera %s: watchdog check failed", self.name)

    def _check_stall(self) -> None:
        now = time.monotonic()
        abandon = False
        with self._lock:
            if self._stall_since is None:
                idle = now - self._last_progress
                if self.stats.state != "connected" or self._waiting:
                    return
                if idle <= self.stall_timeout_s:
                    return
                self._stall_since = now
                self.stats.last_error = f"no frame decoded for {idle:.1f} s"
                self._set_state_locked("reconnecting")
            elif now - self._stall_since > self.stall_timeout_s and not self._stop.is_set():
                self._generation += 1
                self._stall_since = None
                generation = self._generation
                abandon = True
            else:
                return
        if not abandon:
            _LOG.warning(
                "camera %s: no frame from %s for %.1f s; forcing a reconnect",
                self.name,
                self.redacted_url,
                idle,
            )
            return
        _LOG.error(
            "camera %s: decode thread still stuck inside FFmpeg %.1f s after the stall, "
            "despite the timeouts; abandoning it and reconnecting in a fresh thread",
            self.name,
            self.stall_timeout_s,
        )
        self._spawn_decoder(generation)
