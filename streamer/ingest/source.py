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
The thread never raises: failures are counted in :class:`~streamer.ingest.state.CameraStats`,
logged once per state change, with the password redacted (streamer/foundation/redact.py).

This module is the source's lifecycle, its reconnects and its state; its parts are beside
it: opening and decoding (streamer/ingest/decode.py, with what FFmpeg was measured to do),
one session's frames to the queue (streamer/ingest/session.py), sampling and pacing
(streamer/ingest/sampling.py), the stall watchdog (streamer/ingest/watchdog.py), the counters
and the state its threads share (streamer/ingest/state.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from typing import Any

from streamer.domain.frames import Frame
from streamer.foundation.backoff import backoff_delay
from streamer.foundation.redact import redact_text, redact_url, secrets_of
from streamer.ingest.decode import declared_rate, is_live, open_video
from streamer.ingest.frame_queue import FrameQueue
from streamer.ingest.motion import MotionGate
from streamer.ingest.session import Session
from streamer.ingest.state import CameraState, SharedState
from streamer.ingest.watchdog import watch

_LOG = logging.getLogger(__name__)

_BACKOFF_RESET_AFTER_S = 5.0  # a session that delivered frames this long resets the backoff
_MIN_RETRY_DELAY_S = 0.05


class CameraSource:
    """One camera (or file) decoded by PyAV in a named thread, sampled into a queue.

    Sampling (streamer/ingest/sampling.py): a frame is kept when its stream time reaches the
    next slot of ``1 / sample_fps`` (``EVERY_FRAME`` keeps every frame); the first frame is
    always kept, and the slots restart when the stream time jumps back (reconnect, file loop).
    Kept frames are queued as decoded; each is converted to BGR only when something draws
    it (``Frame.image``: the live view, an event's picture); Triton gets its YUV planes.

    ``motion_gate`` (optional; None sends every kept frame): after sampling and pacing, the
    gate decides from a small grey image whether the frame is sent
    (streamer/ingest/motion.py); it is reset at each connect and file loop, so the first frame
    of a session is always sent. Skipped frames are counted in ``stats.skipped_no_motion``.

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
        self.live = is_live(url)
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
        self._shared = SharedState(stall_timeout_s)
        self.stats = self._shared.stats
        self._stop_lock = threading.Lock()
        self._rng = random.Random()
        self._thread: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        self._started = False

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
            if self._shared.stop.is_set():
                raise RuntimeError(f"camera {self.name}: stopped; create a new CameraSource")
            if self._started:
                return
            self._started = True
            self._spawn_decoder(self._shared.generation)
            self._watchdog = threading.Thread(
                target=watch,
                args=(self._check_stall, self._shared.stop, self.stall_timeout_s, self.name),
                name=f"ingest-{self.name}-watchdog",
                daemon=True,
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
            self._shared.stop.set()
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
                with self._shared.lock:
                    self._shared.generation += 1
            self.queue.close()
            with self._shared.lock:
                if self.stats.state != "ended":
                    self._shared.set_state_locked("stopped")

    async def astop(self, timeout_s: float | None = None) -> None:
        """:meth:`stop` without blocking the event loop."""
        await asyncio.to_thread(self.stop, timeout_s)

    # -- helpers

    def error_text(self, exc: BaseException) -> str:
        """The text of ``exc``, this camera's credentials redacted."""
        text = f"{type(exc).__name__}: {exc}"
        return redact_text(text.replace(self._url, self.redacted_url), self._secrets)

    def _backoff(self, attempt: int) -> float:
        """The wait before reconnect ``attempt`` (0 after the first failure): full jitter, at
        least ``_MIN_RETRY_DELAY_S``."""
        delay = backoff_delay(
            attempt + 1, self.reconnect_initial_delay_s, self.reconnect_max_delay_s, self._rng
        )
        return max(_MIN_RETRY_DELAY_S, delay)

    # -- the decode thread

    def _run(self, generation: int) -> None:
        try:
            while self._shared.current(generation):
                try:
                    self._loop(generation)
                    break
                except Exception as exc:  # a bug, not a camera failure: log it, carry on
                    error = self.error_text(exc)
                    _LOG.exception("camera %s: decode thread failed: %s", self.name, error)
                    with self._shared.lock:
                        self.stats.last_error = error
                    if not (self.live or self.loop_file):
                        break
                    if self._shared.stop.wait(self.reconnect_max_delay_s):
                        break
        except BaseException as exc:  # never raise out of the thread
            _LOG.error("camera %s: decode thread failed: %s", self.name, self.error_text(exc))
        finally:
            with self._shared.lock:
                current = generation == self._shared.generation
                if current and self._shared.stop.is_set() and self.stats.state != "ended":
                    if self._shared.set_state_locked("stopped"):
                        _LOG.info("camera %s: stopped", self.name)
                elif current and self.stats.state != "stopped":
                    self._shared.set_state_locked("ended")
            if current:
                self.queue.close()

    @property
    def frame_threads(self) -> bool:
        """Decode with frame threads: only a file played as fast as possible (throughput); a
        camera, or a file paced as one, without (``decode.open_video``)."""
        return not self.live and not self.realtime

    def _loop(self, generation: int) -> None:
        attempt = 0  # backoff exponent
        retrying = generation > 0  # a replacement thread starts by reconnecting
        while self._shared.current(generation):
            if retrying:
                with self._shared.lock:
                    self.stats.reconnects += 1
            try:
                container, stream = open_video(
                    self._url,
                    live=self.live,
                    rtsp_transport=self.rtsp_transport,
                    open_timeout_s=self.open_timeout_s,
                    read_timeout_s=self.read_timeout_s,
                    frame_threads=self.frame_threads,
                )
            except Exception as exc:
                open_error = self.error_text(exc)
                if not self.live and not self.loop_file:
                    self._end(f"cannot open: {open_error}", open_error)
                    return
                delay = self._backoff(attempt)
                attempt += 1
                self._lost(generation, open_error, delay, opening=True)
                if self._shared.stop.wait(delay):
                    return
                retrying = True
                continue

            session: Session | None = None
            error: str | None = None
            try:
                session = self._connected(generation, stream)
                outcome, error = session.decode(container)
            except Exception as exc:
                outcome, error = "error", self.error_text(exc)
            finally:
                with contextlib.suppress(Exception):
                    container.close()
            if not self._shared.current(generation):
                return
            with self._shared.lock:
                self._shared.stall.acknowledge()
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
            if self._shared.stop.wait(delay):
                return
            retrying = True

    def _connected(self, generation: int, stream: Any) -> Session:
        rate = declared_rate(stream)
        now = time.monotonic()
        shared = self._shared
        with shared.lock:
            shared.session_started_locked(now)
            changed = generation == shared.generation and shared.set_state_locked("connected")
        if changed:
            ctx = stream.codec_context
            _LOG.info(
                "camera %s: connected to %s (%sx%s, %s fps, %s)",
                self.name,
                self.redacted_url,
                ctx.width,
                ctx.height,
                f"{rate:.2f}" if rate else "?",
                ctx.name,
            )
        return Session(self, shared, generation, stream, rate=rate, started=now)

    def _lost(self, generation: int, error: str, delay: float, *, opening: bool) -> None:
        shared = self._shared
        with shared.lock:
            if generation != shared.generation:
                return
            self.stats.last_error = error
            previous = self.stats.state
            changed = shared.set_state_locked("reconnecting")
        if not changed:
            log, what = _LOG.debug, "%s still failing (%s); retrying in %.1f s"
        elif opening and previous == "starting":
            log, what = _LOG.warning, "cannot open %s (%s); retrying in %.1f s"
        else:
            log, what = _LOG.warning, "lost %s (%s); reconnecting in %.1f s"
        log("camera %s: " + what, self.name, self.redacted_url, error, delay)

    def _end(self, reason: str, error: str | None) -> None:
        with self._shared.lock:
            if error is not None:
                self.stats.last_error = error
            changed = self._shared.set_state_locked("ended")
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

    # -- the watchdog thread (streamer/ingest/watchdog.py)

    def _check_stall(self) -> None:
        now = time.monotonic()
        with self._shared.lock:
            stall = self._shared.stall.check(
                now, connected=self.stats.state == "connected", stopping=self._shared.stop.is_set()
            )
            if stall is None:
                return
            if stall.action == "reconnect":
                self.stats.last_error = f"no frame decoded for {stall.idle_s:.1f} s"
                self._shared.set_state_locked("reconnecting")
            else:
                self._shared.generation += 1
                generation = self._shared.generation
        if stall.action == "reconnect":
            _LOG.warning(
                "camera %s: no frame from %s for %.1f s; forcing a reconnect",
                self.name,
                self.redacted_url,
                stall.idle_s,
            )
            return
        _LOG.error(
            "camera %s: decode thread still stuck inside FFmpeg %.1f s after the stall, "
            "despite the timeouts; abandoning it and reconnecting in a fresh thread",
            self.name,
            self.stall_timeout_s,
        )
        self._spawn_decoder(generation)
