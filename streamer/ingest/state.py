"""What a camera's threads share: its counters and state, under one lock.

A :class:`~streamer.ingest.source.CameraSource` (the lifecycle and the reconnects), its
sessions (streamer/ingest/session.py, in the decode thread) and its watchdog thread
(streamer/ingest/watchdog.py) all read and write one :class:`SharedState`; the owner reads
:class:`CameraStats` from any thread.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Literal

from streamer.ingest.watchdog import StallDetector

CameraState = Literal["starting", "connected", "reconnecting", "ended", "stopped"]

_FPS_WINDOW_S = 0.5  # decode-rate window; the EMA is over windows
_FPS_EMA_ALPHA = 0.5


@dataclass(slots=True)
class CameraStats:
    """Counters of one :class:`~streamer.ingest.source.CameraSource`, updated by its decode
    thread.

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


class SharedState:
    """The state of one camera that its threads share; ``lock`` guards all of it.

    ``generation`` names the current decode thread: the watchdog bumps it when it abandons a
    thread stuck inside FFmpeg, and a thread of an older generation then touches nothing.
    ``stop`` is set once, by the owner. ``stall`` is read by the decode loop without the lock
    (see :class:`StallDetector`).
    """

    def __init__(self, stall_timeout_s: float) -> None:
        now = time.monotonic()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.stats = CameraStats()
        self.generation = 0
        #: The index of the next frame queued (it counts up across sessions).
        self.next_index = 0
        self.stall = StallDetector(stall_timeout_s, now)
        self._fps_window = (now, 0)

    def current(self, generation: int) -> bool:
        """Whether a decode thread of ``generation`` should carry on."""
        return generation == self.generation and not self.stop.is_set()

    def set_state_locked(self, state: CameraState) -> bool:
        """Move to ``state``; whether it changed. Under ``lock``."""
        if self.stats.state == state:
            return False
        self.stats.state = state
        return True

    def session_started_locked(self, now: float) -> None:
        """A session starts: no stall, a fresh decode-rate window. Under ``lock``."""
        self.stall.reset(now)
        self._fps_window = (now, 0)

    def frame_decoded_locked(self, now: float, *, corrupt: bool) -> None:
        """Count a decoded frame (a concealed one is also a decode error). Under ``lock``."""
        stats = self.stats
        stats.decoded += 1
        if corrupt:
            stats.decode_errors += 1
        self.stall.progress(now)
        start, count = self._fps_window
        count += 1
        elapsed = now - start
        if elapsed >= _FPS_WINDOW_S:
            rate = count / elapsed
            fps = stats.fps
            stats.fps = rate if fps == 0.0 else _FPS_EMA_ALPHA * rate + (1 - _FPS_EMA_ALPHA) * fps
            self._fps_window = (now, 0)
        else:
            self._fps_window = (start, count)
