"""Opening a camera or a file with PyAV, and decoding it packet by packet.

:func:`open_video` opens a URL or a path with FFmpeg's options for its scheme and both
timeouts; :func:`decode_packets` demuxes and decodes one session, one packet at a time, so
that one bad packet costs that packet only, and hands each decoded picture (a PyAV
``VideoFrame``, not converted) to its caller. :class:`~streamer.ingest.source.CameraSource`
runs them in its decode thread (for the service's cameras and ``python -m streamer
recognise``).

What PyAV 18 (FFmpeg 8) does here, measured against a GStreamer RTSP server:

* A server that dies: no exception, the demuxer simply ends (a disconnect for a live source).
  Opening a closed port: ``av.error.ConnectionRefusedError`` at once.
* A server that hangs (SIGSTOP): with no timeout the read blocks for ever. Both FFmpeg's
  socket ``timeout`` option (microseconds; ``av.error.TimeoutError``) and PyAV's
  ``av.open(timeout=(open_s, read_s))`` (an FFmpeg interrupt callback, restarted before each
  packet read; ``av.error.ExitError``) end it, each after about *twice* its value. Both are
  set; the first to fire wins. What neither ends is the stall watchdog's
  (streamer/ingest/watchdog.py).
* A server that accepts the connection and never answers: the open ends after
  ``open_timeout_s`` with ``av.error.InvalidDataError`` (RTSP: nothing to parse) or
  ``ExitError`` (HTTP, the interrupt callback). :func:`open_video` reports both, when they
  come that late, as :class:`OpenTimeoutError`, which says what happened.
* The H.264 decoder conceals most damage silently: a corrupt packet raises nothing. Damage is
  counted from ``packet.is_corrupt`` (demuxer), ``frame.is_corrupt`` (concealed frames, still
  delivered; counted by the caller) and exceptions from ``packet.decode()`` (that packet is
  skipped). A file's demuxer errors are counted and read past, up to ``MAX_FILE_READ_ERRORS``
  in a row.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

import av
import av.error

from streamer.foundation.redact import url_scheme

LIVE_SCHEMES = frozenset(
    {"rtsp", "rtsps", "rtmp", "rtmps", "http", "https", "udp", "tcp", "srt", "rtp"}
)
# Schemes whose FFmpeg protocol reads option ``timeout`` as a socket I/O timeout in µs.
_SOCKET_TIMEOUT_SCHEMES = frozenset({"rtsp", "rtsps", "http", "https", "udp", "tcp", "srt"})
_US_PER_S = 1_000_000
#: Consecutive demuxer errors in a file before it counts as ended.
MAX_FILE_READ_ERRORS = 50

#: How a session ended: the end of the stream, a read error (live), the caller stopped it,
#: or the caller found it stalled.
Outcome = Literal["eof", "error", "stopped", "stalled"]
#: Damage counted on the way: a packet the demuxer flagged corrupt (decoded anyway), an
#: unreadable stretch of a file (read past), a packet the decoder rejected (skipped).
ErrorKind = Literal["corrupt", "read", "decode"]


#: A live open that fails with "invalid data" or "exit" this share of ``open_timeout_s`` or
#: later was ended by the timeout, not by what the server sent.
_TIMED_OUT_SHARE = 0.9


class OpenTimeoutError(TimeoutError):
    """A live source accepted the connection but did not answer within the open timeout."""


def is_live(url: str) -> bool:
    """Whether ``url`` is a live source (reconnected for ever) rather than a file."""
    return url_scheme(url) in LIVE_SCHEMES


def open_options(url: str, *, rtsp_transport: str, read_timeout_s: float) -> dict[str, str]:
    """FFmpeg's options for a live ``url``: RTSP transport and quick probing, and the
    socket I/O timeout of the protocols that read option ``timeout`` that way."""
    scheme = url_scheme(url)
    options: dict[str, str] = {}
    if scheme in ("rtsp", "rtsps"):
        options.update(rtsp_transport=rtsp_transport, analyzeduration="0", probesize="32")
    if scheme in _SOCKET_TIMEOUT_SCHEMES:
        # At least 1 us: FFmpeg reads "0" as no timeout at all.
        options["timeout"] = str(max(1, int(read_timeout_s * _US_PER_S)))
    return options


def open_video(
    url: str,
    *,
    live: bool,
    rtsp_transport: str,
    open_timeout_s: float,
    read_timeout_s: float,
    frame_threads: bool = False,
) -> tuple[Any, Any]:
    """Open the container at ``url`` and pick its first video stream: ``(container, stream)``.

    Raises what PyAV raises, or ``ValueError`` when there is no video stream (the container
    is then closed). ``frame_threads``: decode with frame threads, for a file played as fast
    as possible (throughput). A camera, or a file paced as one, decodes without: no
    frame-thread delay, and each frame thread keeps pictures of its own (13 MB more per
    1080p H.264 stream with 3 threads, measured).
    """
    if live:
        options = open_options(url, rtsp_transport=rtsp_transport, read_timeout_s=read_timeout_s)
        started = time.monotonic()
        try:
            container = av.open(url, options=options, timeout=(open_timeout_s, read_timeout_s))
        except (av.error.InvalidDataError, av.error.ExitError) as exc:
            if time.monotonic() - started < _TIMED_OUT_SHARE * open_timeout_s:
                raise
            raise OpenTimeoutError(
                f"no answer within {open_timeout_s:g} s (open_timeout_s): the server took "
                "the connection but sent nothing it could open"
            ) from exc
    else:
        container = av.open(url, timeout=(open_timeout_s, read_timeout_s))
    try:
        if not container.streams.video:
            raise ValueError("no video stream")
        stream = container.streams.video[0]
        if frame_threads:
            stream.thread_type = "AUTO"
        return container, stream
    except BaseException:
        container.close()
        raise


def declared_rate(stream: Any) -> float | None:
    """The frame rate ``stream`` declares (average, guessed or base), None when it has none."""
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    return float(rate) if rate else None


def decode_packets(
    container: Any,
    stream: Any,
    *,
    live: bool,
    running: Callable[[], bool],
    stalled: Callable[[], bool],
    on_frame: Callable[[Any], None],
    on_error: Callable[[ErrorKind, BaseException | None], None],
) -> tuple[Outcome, BaseException | None]:
    """Demux and decode one session of ``stream``: ``(outcome, error)``.

    ``running`` is asked before each packet and each frame (False: "stopped"), ``stalled``
    before each packet (True: "stalled"); each decoded picture goes to ``on_frame``, each
    piece of damage to ``on_error``. ``error`` is the read error that ended a live session
    ("error"), else None. A file's read errors are read past: the demuxer starts again from
    where it stands, and more than ``MAX_FILE_READ_ERRORS`` in a row end the file ("eof").
    """
    packets = container.demux(stream)
    read_errors = 0
    try:
        while True:
            if not running():
                return "stopped", None
            if stalled():
                return "stalled", None
            try:
                packet = next(packets)
            except StopIteration:
                return "eof", None
            except av.error.FFmpegError as exc:
                if live:
                    return "error", exc
                # A file: count it, read on from where the demuxer stands.
                read_errors += 1
                on_error("read", exc)
                if read_errors > MAX_FILE_READ_ERRORS:
                    return "eof", None
                packets.close()
                packets = container.demux(stream)
                continue
            read_errors = 0
            if packet.is_corrupt:
                on_error("corrupt", None)
            try:
                frames = packet.decode()
            except (av.error.FFmpegError, ValueError) as exc:
                on_error("decode", exc)
                continue
            for frame in frames:
                if not running():
                    return "stopped", None
                on_frame(frame)
    finally:
        packets.close()
