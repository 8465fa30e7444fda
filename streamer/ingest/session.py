"""One session of a camera (a connection, or one pass over a file): frames to the queue.

:class:`Session` runs in the camera's decode thread, from an opened stream to its end. Each
decoded picture is counted, timed and sampled (streamer/ingest/sampling.py), paced when a
file plays in real time, passed through the motion gate (streamer/ingest/motion.py) and
queued as decoded (sent to Triton as its YUV planes; converted to BGR only when something
draws it, ``Frame.image``), and kept now and then for the live view when the gate held it
back. The reconnects around sessions are the source's (streamer/ingest/source.py).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from streamer.domain.frames import Frame
from streamer.ingest.decode import ErrorKind, Outcome, decode_packets
from streamer.ingest.sampling import Sampler
from streamer.ingest.state import SharedState

if TYPE_CHECKING:
    from streamer.ingest.source import CameraSource

_LOG = logging.getLogger(__name__)

#: How often a frame skipped by the motion gate is still converted for the live view.
PREVIEW_INTERVAL_S = 1.0
#: The longest a file played as fast as possible waits for the answers to its frames in flight
#: before the motion gate decides without them (past every request timeout: a fault).
ANSWER_WAIT_S = 120.0


class Session:
    """The frames of one session of ``source``'s decode thread ``generation``.

    ``rate``: the frame rate the stream declares (None if it declares none); ``started``:
    the monotonic time the session connected. Skipping non-reference frames, when the source
    asks for it and the stream is fast enough, is set on the decoder here.
    """

    def __init__(
        self,
        source: CameraSource,
        shared: SharedState,
        generation: int,
        stream: Any,
        *,
        rate: float | None,
        started: float,
    ) -> None:
        self.source = source
        self.stream = stream
        self.started = started
        self._shared = shared
        self._generation = generation
        #: Called by the motion gate before it reads the track signal (files played as fast
        #: as possible only: see :meth:`_wait_answered`).
        self._settle = None if source.live or source.realtime else self._wait_answered
        self.sampler = Sampler(
            source.sample_fps, rate, skip_non_reference=source.skip_non_reference
        )
        if source.motion_gate is not None:
            source.motion_gate.reset()  # the first frame of a session is always sent
        if self.sampler.skipping_non_reference:
            # Frames no other frame refers to (B-frames, mostly) are not decoded at all.
            stream.codec_context.skip_frame = "NONREF"
        with shared.lock:
            shared.stats.skipping_non_reference = self.sampler.skipping_non_reference

    @property
    def frames(self) -> int:
        """Frames decoded in this session."""
        return self.sampler.frames

    def decode(self, container: Any) -> tuple[Outcome, str | None]:
        """Decode the session to its end: ``(outcome, error text)`` (credentials redacted)."""
        shared = self._shared
        outcome, exc = decode_packets(
            container,
            self.stream,
            live=self.source.live,
            running=lambda: shared.current(self._generation),
            stalled=lambda: shared.stall.stalled,
            on_frame=self._on_frame,
            on_error=self._on_error,
        )
        if outcome == "stalled":
            return outcome, f"no frame decoded for {self.source.stall_timeout_s:.1f} s"
        return outcome, None if exc is None else self.source.error_text(exc)

    def _on_error(self, kind: ErrorKind, exc: BaseException | None) -> None:
        shared = self._shared
        with shared.lock:
            if exc is None:  # a packet the demuxer flagged corrupt: decoded anyway
                shared.stats.decode_errors += 1
                return
            if self._generation != shared.generation:
                return
            shared.stats.decode_errors += 1
            count = shared.stats.decode_errors
        name, text = self.source.name, self.source.error_text(exc)
        _LOG.debug("camera %s: %s error #%d: %s", name, kind, count, text)

    def _on_frame(self, frame: Any) -> None:
        source, shared, sampler = self.source, self._shared, self.sampler
        with shared.lock:
            shared.frame_decoded_locked(time.monotonic(), corrupt=frame.is_corrupt)

        t = sampler.stream_time(frame.pts, frame.time_base)
        rate = sampler.reference_rate_too_low(t)
        if rate is not None:
            self.stream.codec_context.skip_frame = "DEFAULT"
            with shared.lock:
                shared.stats.skipping_non_reference = False
            _LOG.info(
                "camera %s: reference frames come at %.1f fps, under sample_fps %.4g: "
                "decoding every frame",
                source.name,
                rate,
                source.sample_fps,
            )
        if not sampler.keep(t):
            return
        if source.realtime and not source.live:
            delay = sampler.pace(t, time.monotonic())
            if delay > 0:
                with shared.stall.waiting():
                    shared.stop.wait(delay)
            if not shared.current(self._generation):
                return
        gate = source.motion_gate
        decision = gate.check(frame, t, self._settle) if gate is not None else None
        if decision == "skip":
            with shared.lock:
                if self._generation == shared.generation:
                    shared.stats.skipped_no_motion += 1
            self._keep_preview(frame, t)
            return
        wall_time, monotonic = time.time(), time.monotonic()
        with shared.lock:
            if self._generation != shared.generation:
                return
            index = shared.next_index
            shared.next_index += 1
        item = Frame(
            camera=source.name,
            index=index,
            pts_s=t,
            wall_time=wall_time,
            monotonic=monotonic,
            pixels=frame,  # as decoded: sent as its YUV planes, BGR only if drawn
            focus=None if gate is None or decision is None else gate.focus(decision),
        )
        with shared.stall.waiting():
            queued = source.queue.put_threadsafe(item, shared.stop)
        if queued and gate is not None:
            gate.tracks.sent(index)
        with shared.lock:
            shared.stall.progress(time.monotonic())
            if queued:
                shared.stats.sampled += 1
            shared.stats.dropped = source.queue.dropped

    def _wait_answered(self) -> None:
        """A file played as fast as possible: the gate's decision waits for the answers to
        the frames sent before it (streamer/ingest/motion.py), so that it is the same on a
        fast and a slow machine. Bounded by ``ANSWER_WAIT_S``; past it the gate decides on
        what it knows (the answers are late beyond any request timeout: a fault)."""
        gate, shared = self.source.motion_gate, self._shared
        assert gate is not None
        with shared.stall.waiting():
            answered = gate.tracks.wait_answered(shared.stop, ANSWER_WAIT_S)
        if not answered and not shared.stop.is_set():
            _LOG.warning(
                "camera %s: %d frames unanswered after %.0f s: the motion gate goes on",
                self.source.name,
                gate.tracks.in_flight,
                ANSWER_WAIT_S,
            )

    def _keep_preview(self, frame: Any, t: float) -> None:
        """A gated frame for the live view, at most every ``PREVIEW_INTERVAL_S``.

        The live view draws the latest recognised frame; while a still scene is gated that
        frame would stand still (a timestamp overlay included). So a skipped frame is still
        kept now and then (once a second) for it to show, as decoded: the live view converts
        it (``Frame.image``) only if somebody watches.
        """
        source, shared = self.source, self._shared
        now = time.monotonic()
        previous = source.latest_preview
        if previous is not None and now - previous.monotonic < PREVIEW_INTERVAL_S:
            return
        with shared.lock:
            if self._generation != shared.generation:
                return
            index = shared.next_index  # not taken: the sent frames' indices stay consecutive
        source.latest_preview = Frame(source.name, index, t, time.time(), now, frame)
