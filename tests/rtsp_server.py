"""A real RTSP server for tests: GStreamer's ``GstRtspServer`` serving a file on loop.

Two halves in one file:

* run as a script with Debian's ``/usr/bin/python3`` (the GObject bindings ``gi`` belong to it,
  not to the project's venv)::

      /usr/bin/python3 tests/rtsp_server.py --file clip.ts --port 0 --mount /cam

  It serves each mount over RTSP on 127.0.0.1 (TCP interleaved or UDP, as the client asks),
  without re-encoding: ``multifilesrc loop=true ! tsdemux ! h264parse ! rtph264pay``. Every
  client gets its own pipeline from the file's start (``set_shared(False)``), so its first
  frame is the keyframe. It prints ``READY <port>`` once attached.
* imported by tests: :class:`RtspServer` runs that script as a child process, on a free port
  chosen by the kernel at first start and kept across restarts, with ``kill()`` (SIGKILL),
  ``freeze()``/``thaw()`` (SIGSTOP/SIGCONT) and ``stop()``; the child also gets a parent-death
  signal, so it never outlives the test process.

The SEEKING fix: FFmpeg's client sends ``Range: npt=0-`` with PLAY; a looping pipeline cannot
seek and the server then answers 503. A probe on ``pay0``'s sink pad answers the SEEKING query
with "not seekable", and PLAY works.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

HOST = "127.0.0.1"
SYSTEM_PYTHON = "/usr/bin/python3"
_READY_TIMEOUT_S = 15.0
_STOP_TIMEOUT_S = 5.0


# --------------------------------------------------------------------------- server (script)


def _serve(file: Path, port: int, mounts: Sequence[str]) -> int:  # pragma: no cover - subprocess
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstRtspServer", "1.0")
    from gi.repository import GLib, Gst, GstRtspServer

    Gst.init(None)

    def answer_not_seekable(_pad: Any, info: Any) -> Any:
        query = info.get_query()
        if query is not None and query.type == Gst.QueryType.SEEKING:
            query.set_seeking(Gst.Format.TIME, False, 0, -1)
            return Gst.PadProbeReturn.HANDLED
        return Gst.PadProbeReturn.OK

    def on_media_configure(_factory: Any, media: Any) -> None:
        pay = media.get_element().get_by_name("pay0")
        pay.get_static_pad("sink").add_probe(Gst.PadProbeType.QUERY_UPSTREAM, answer_not_seekable)

    location = str(file).replace("\\", "\\\\").replace('"', '\\"')
    launch = (
        f'( multifilesrc location="{location}" loop=true ! tsdemux ! h264parse'
        " ! rtph264pay name=pay0 pt=96 config-interval=-1 )"
    )
    server = GstRtspServer.RTSPServer()
    server.set_address(HOST)
    server.set_service(str(port))
    mount_points = server.get_mount_points()
    for mount in mounts:
        factory = GstRtspServer.RTSPMediaFactory()
        factory.set_launch(launch)
        factory.set_shared(False)
        factory.connect("media-configure", on_media_configure)
        mount_points.add_factory(mount, factory)
    if server.attach(None) == 0:
        print(f"ERROR cannot attach to {HOST}:{port}", flush=True)
        return 1
    print(f"READY {server.get_bound_port()}", flush=True)

    loop = GLib.MainLoop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, sig, loop.quit)
    loop.run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:  # pragma: no cover - subprocess
    parser = argparse.ArgumentParser(description="Serve a media file on loop over RTSP.")
    parser.add_argument("--file", type=Path, required=True, help="an MPEG-TS file with H.264")
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    parser.add_argument("--mount", action="append", default=[], help="repeatable; /cam")
    args = parser.parse_args(argv)
    return _serve(args.file.resolve(), args.port, args.mount or ["/cam"])


# --------------------------------------------------------------------------- client (tests)


class RtspServer:
    """The script above as a child process, for tests.

    The port is chosen by the kernel at the first ``start()`` and kept, so a test can
    ``kill()`` the server and ``start()`` it again on the same URL. Start it from a
    long-lived thread (the parent-death signal fires when the *starting thread* exits).
    """

    def __init__(
        self,
        path: Path,
        mounts: Sequence[str] = ("/cam",),
        *,
        port: int = 0,
        python: str = SYSTEM_PYTHON,
    ) -> None:
        if not Path(path).is_file():
            raise FileNotFoundError(f"RtspServer: no such media file {path}")
        bad = [m for m in mounts if not m.startswith("/")]
        if bad:
            raise ValueError(f"RtspServer: mounts must start with '/': {bad}")
        self.path = Path(path).resolve()
        self.mounts = list(mounts)
        self.port = port
        self.python = python
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._frozen = False

    # -- lifecycle

    def start(self) -> Self:
        """Start the server (again, on the same port if it ran before); wait for READY."""
        if self.running:
            return self
        self._reap()
        cmd = [self.python, str(Path(__file__).resolve()), "--file", str(self.path)]
        cmd += ["--port", str(self.port)]
        for mount in self.mounts:
            cmd += ["--mount", mount]
        # Imported here: the script half runs with Debian's python3, without the project.
        from streamer.foundation.parent_death import dying_with_parent

        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in _reap()
        self._proc = subprocess.Popen(
            dying_with_parent(cmd, signal.SIGKILL),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
        )
        self._frozen = False
        try:
            self.port = self._wait_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_ready(self) -> int:
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        deadline = time.monotonic() + _READY_TIMEOUT_S
        buffer = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([stdout], [], [], 0.1)
            if ready:
                chunk = os.read(stdout.fileno(), 4096)
                if not chunk:
                    break
                buffer += chunk
                for line in buffer.decode(errors="replace").splitlines():
                    if line.startswith("READY "):
                        return int(line.split()[1])
            elif self._proc.poll() is not None:
                break
        raise RuntimeError(
            f"RTSP server did not become ready (exit {self._proc.poll()}): "
            f"{buffer.decode(errors='replace')!r} {self._stderr_tail()}"
        )

    def _stderr_tail(self, limit: int = 2000) -> str:
        if self._stderr is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0)
            return self._stderr.read().decode(errors="replace")[-limit:]
        return ""

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def url(self, mount: str = "/cam", *, userinfo: str = "") -> str:
        """``rtsp://127.0.0.1:PORT/mount`` (``userinfo`` such as ``user:pw@`` is inserted)."""
        if not self.port:
            raise RuntimeError("RtspServer: start() it first (the port is not chosen yet)")
        return f"rtsp://{userinfo}{HOST}:{self.port}{mount}"

    def kill(self) -> None:
        """SIGKILL, as a crashed camera: connected clients see their connection drop."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            self._proc.wait(timeout=_STOP_TIMEOUT_S)
        self._reap()

    def freeze(self) -> None:
        """SIGSTOP: the sockets stay open but nothing is sent (a hung camera)."""
        if self.running and self._proc is not None:
            self._proc.send_signal(signal.SIGSTOP)
            self._frozen = True

    def thaw(self) -> None:
        """SIGCONT after :meth:`freeze`."""
        if self.running and self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)
        self._frozen = False

    def stop(self) -> None:
        """SIGTERM (after SIGCONT if frozen), then SIGKILL if it does not exit in time."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            if self._frozen:
                self.thaw()
            proc.terminate()
            try:
                proc.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=_STOP_TIMEOUT_S)
        self._reap()

    def _reap(self) -> None:
        if self._proc is not None:
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self._frozen = False

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
