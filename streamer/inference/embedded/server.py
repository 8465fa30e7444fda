"""Embedded Triton Inference Server: a ``tritonserver`` child process on 127.0.0.1.

Usage::

    with EmbeddedTriton(Path("model_repository")) as server:
        client = tritonclient.grpc.InferenceServerClient(server.grpc_url)

Every server runs the wheel's binary from the copied server tree (``tree.py`` beside this
module), bound to 127.0.0.1 on free ports; its models import the packages of their own
virtualenv through a stub env (``environment.py``: numpy<2, and why); it runs in its own
process group with a parent-death signal (``process.py``), so that no ``tritonserver``, stub
process or ``/dev/shm`` region outlives its owner; its output goes to the log line by line
(``log.py``). A failed start raises :class:`TritonStartError` (``errors.py``).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import NoReturn, Self

from streamer.inference.embedded import process
from streamer.inference.embedded.environment import default_model_env, make_stub_env
from streamer.inference.embedded.errors import TritonStartError
from streamer.inference.embedded.log import LOG, TAIL_LINES, ServerLog
from streamer.inference.embedded.tree import default_work_dir, prepare_server_tree, wheel_libs_dir

HOST = "127.0.0.1"
_EXIT_TIMEOUT_S = 10
#: How long a stop waits for the server to exit on SIGTERM before it kills the group: Triton
#: gives up on its unloading models after ``--exit-timeout-secs`` (and then can hang: seen
#: with a model still busy on CPU), so a few seconds more is enough.
STOP_TIMEOUT_S = _EXIT_TIMEOUT_S + 3.0
_PORT_ATTEMPTS = 3
#: Starts tried again after tritonserver crashed (SIGSEGV, SIGABRT) before it was ready.
_CRASH_RETRIES = 5
_CRASH_PAUSE_S = 1.0
_CRASH_SIGNALS = (-signal.SIGSEGV, -signal.SIGABRT)


class EmbeddedTriton:
    """A ``tritonserver`` child process serving ``model_repository`` on 127.0.0.1.

    ``start()`` blocks until ``/v2/health/ready`` answers 200 (every model loaded); a failure
    raises :class:`TritonStartError` with the server log's error lines and tail (its first
    error line in ``first_error``). ``stop()`` is idempotent.
    Server output goes to the ``streamer.inference.embedded.server`` logger, line by line.
    """

    def __init__(
        self,
        model_repository: Path,
        *,
        startup_timeout_s: float = 180.0,
        work_dir: Path | None = None,
        grpc_port: int | None = None,
        http_port: int | None = None,
        metrics_port: int | None = None,
        log_verbose: int = 0,
        extra_args: Sequence[str] = (),
        stub_python_paths: Sequence[Path] = (),
        python_env: Path | None = None,
    ) -> None:
        """``stub_python_paths`` go first on the stub's ``sys.path`` (e.g. a numpy<2 folder).

        ``python_env`` is the virtualenv whose packages the models import (torch,
        numpy<2, OpenCV); default: :func:`default_model_env`, else this interpreter's.
        """
        self.python_env = python_env if python_env is not None else default_model_env()
        self.model_repository = Path(model_repository).absolute()
        self.startup_timeout_s = startup_timeout_s
        self.work_dir = Path(work_dir) if work_dir is not None else default_work_dir()
        self.log_verbose = log_verbose
        self.extra_args = tuple(extra_args)
        self.stub_python_paths = tuple(Path(p).absolute() for p in stub_python_paths)
        self._requested_ports = (grpc_port, http_port, metrics_port)
        self._ports: tuple[int, int, int] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._exit_before_ready: int | None = None  # the exit code of a failed start
        self._stubs: dict[int, str] = {}  # the Python-backend stubs it had once ready
        self._reader: threading.Thread | None = None
        self._stub_env: Path | None = None
        self._shm_prefix = ""
        self._log = ServerLog()
        self._lock = threading.RLock()
        self._cancel = threading.Event()  # set by stop() to abort a start() in progress
        self._atexit_registered = False

    # -- properties ---------------------------------------------------------------------------

    @property
    def grpc_url(self) -> str:
        """``127.0.0.1:PORT`` for ``tritonclient.grpc``."""
        return f"{HOST}:{self._port(0)}"

    @property
    def http_url(self) -> str:
        """``127.0.0.1:PORT`` for ``tritonclient.http``."""
        return f"{HOST}:{self._port(1)}"

    @property
    def metrics_url(self) -> str:
        """Full Prometheus URL, ``http://127.0.0.1:PORT/metrics``."""
        return f"http://{HOST}:{self._port(2)}/metrics"

    @property
    def pid(self) -> int | None:
        """Process id of the running server, or None."""
        proc = self._proc
        return proc.pid if proc is not None else None

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        proc = self._proc
        return proc is not None and proc.returncode is None and process.alive(proc.pid)

    @property
    def dead_stubs(self) -> list[str]:
        """The model instances whose Python-backend stub died since the server was ready.

        Triton 2.51 neither restarts a dead stub nor reports it: its health endpoints stay
        200 while every request to that model fails ("Stub process 'lprnet_0_0' is not
        healthy"; triton-inference-server/server#8604, #7862).
        """
        proc = self._proc
        if proc is None:
            return []
        return sorted(
            name for pid, name in self._stubs.items() if not process.member_alive(pid, proc.pid)
        )

    @property
    def exit_code(self) -> int | None:
        """The exit code of a server that has exited (negative: the signal), else None."""
        proc = self._proc
        return process.exit_code(proc) if proc is not None else None

    @property
    def shm_prefix(self) -> str:
        """Prefix of this server's Python-backend regions in /dev/shm ('' before start)."""
        return self._shm_prefix

    def log_tail(self, n: int = TAIL_LINES) -> list[str]:
        """The last ``n`` lines the server printed."""
        return self._log.tail(n)

    def _port(self, index: int) -> int:
        port = self._ports[index] if self._ports else self._requested_ports[index]
        if port is None:
            raise RuntimeError("ports are chosen at start(); the server is not started")
        return port

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the server and wait until it is ready; raises TritonStartError."""
        with self._lock:
            self._cancel.clear()
            if self._proc is not None:
                raise RuntimeError("EmbeddedTriton is already started")
            tree = prepare_server_tree(self.work_dir)
            deadline = time.monotonic() + self.startup_timeout_s
            attempts = _PORT_ATTEMPTS if None in self._requested_ports else 1
            crashes_left = _CRASH_RETRIES
            attempt = 0
            while True:
                attempt += 1
                self._exit_before_ready = None
                self._launch(tree)
                try:
                    self._wait_ready(deadline)
                    assert self._proc is not None
                    # Every model is loaded once it is ready: these are all its stubs.
                    self._stubs = process.python_stubs(self._proc.pid)
                    LOG.info(
                        "Triton ready (pid %s, %d Python-backend stubs): grpc %s, http %s",
                        self.pid,
                        len(self._stubs),
                        self.grpc_url,
                        self.http_url,
                    )
                    return
                except BaseException as exc:  # KeyboardInterrupt too: never leave it running
                    taken = self._log.ports_in_use()
                    self._stop_locked(timeout_s=10.0)
                    retry = isinstance(exc, TritonStartError) and not self._cancel.is_set()
                    fixed = {p for p in self._requested_ports if p is not None}
                    if retry and attempt < attempts and taken and not taken & fixed:
                        LOG.warning("port taken while starting Triton, retrying: %s", attempt)
                        continue
                    if retry and crashes_left and self._exit_before_ready in _CRASH_SIGNALS:
                        # tritonserver 2.51 sometimes crashes while it starts ("epoll_wait
                        # error: Bad file descriptor" in its gRPC event engine, then SIGABRT
                        # or SIGSEGV): seen here when it starts again on a port its clients
                        # keep connecting to (after a kill -9, in bench.scale_out: 1 start in
                        # 3, up to 4 crashes in a row); a later start works.
                        crashes_left -= 1
                        time.sleep(_CRASH_PAUSE_S)
                        LOG.warning(
                            "tritonserver crashed (exit code %s) while starting; starting it again",
                            self._exit_before_ready,
                        )
                        continue
                    raise

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM the server and wait; SIGKILL its process group after ``timeout_s``.

        Called while another thread is in :meth:`start`, it makes that start fail first.
        """
        self._cancel.set()
        with self._lock:
            self._stop_locked(timeout_s)

    def restart(self, timeout_s: float = 10.0) -> None:
        """Stop what is left of the server (stubs, shared memory, the zombie) and start it
        again on the same ports, so that its clients reconnect to the same address."""
        with self._lock:
            ports = self._ports
            self._stop_locked(timeout_s)
            if ports is not None:
                self._requested_ports = ports
        self.start()

    async def astart(self) -> None:
        """:meth:`start` in a worker thread.

        Cancelling the awaiting task does not stop the start: :meth:`astop` aborts it.
        """
        await asyncio.to_thread(self.start)

    async def astop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """:meth:`stop` in a worker thread."""
        await asyncio.to_thread(self.stop, timeout_s)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------------------------

    def _launch(self, tree: Path) -> None:
        grpc_port, http_port, metrics_port = self._requested_ports
        if None in self._requested_ports:
            free = iter(process.free_ports(HOST, 3))
            grpc_port = grpc_port or next(free)
            http_port = http_port or next(free)
            metrics_port = metrics_port or next(free)
        assert grpc_port and http_port and metrics_port
        self._ports = (grpc_port, http_port, metrics_port)
        self._shm_prefix = f"lpr_triton_{os.getpid()}_{secrets.token_hex(4)}_"
        self._log.clear()

        libs = wheel_libs_dir()
        stub_env = make_stub_env(self.python_env, self.stub_python_paths)
        self._stub_env = stub_env.root
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(libs), env.get("LD_LIBRARY_PATH", "")) if p
        )
        env["PATH"] = os.pathsep.join(p for p in (str(stub_env.bin), env.get("PATH", "")) if p)
        cmd = [
            str(tree / "bin" / "tritonserver"),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={tree / 'backends'}",
            f"--grpc-address={HOST}",
            f"--grpc-port={grpc_port}",
            f"--http-address={HOST}",
            f"--http-port={http_port}",
            f"--metrics-address={HOST}",
            f"--metrics-port={metrics_port}",
            f"--exit-timeout-secs={_EXIT_TIMEOUT_S}",
            # The client pings every triton.keepalive_time_s, idle streams too: allow it.
            "--grpc-keepalive-permit-without-calls=1",
            "--grpc-http2-max-pings-without-data=0",
            "--grpc-http2-min-recv-ping-interval-without-data=1000",
            f"--backend-config=python,shm-region-prefix-name={self._shm_prefix}",
            f"--log-verbose={self.log_verbose}",
            *self.extra_args,
        ]
        LOG.info("starting %s", shlex.join(cmd))
        try:
            self._proc, self._reader = process.spawn(cmd, env, self._log.pump)
        except TritonStartError:
            self._cleanup_files()
            raise
        if not self._atexit_registered:
            atexit.register(self._atexit_stop)
            self._atexit_registered = True

    def _wait_ready(self, deadline: float) -> None:
        proc = self._proc
        assert proc is not None
        url = f"http://{self.http_url}/v2/health/ready"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while True:
            if process.leader_exited(proc):
                code = process.exit_code(proc)
                self._exit_before_ready = code
                if self._reader is not None:
                    self._reader.join(timeout=2.0)  # collect the last lines
                self._fail(
                    f"tritonserver exited with code {code} before it was ready "
                    f"({self.model_repository})"
                )
            try:
                with opener.open(url, timeout=1.0) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if self._cancel.is_set():
                raise TritonStartError("start() aborted by stop()")
            if time.monotonic() > deadline:
                self._fail(
                    f"tritonserver not ready after {self.startup_timeout_s:.0f} s "
                    f"({self.model_repository})"
                )
            time.sleep(0.1)

    def _fail(self, summary: str) -> NoReturn:
        """Raise :class:`TritonStartError` with what the server's log says went wrong."""
        raise TritonStartError(
            summary, self._log.failure_summary(), first_error=self._log.first_error()
        )

    def _stop_locked(self, timeout_s: float) -> None:
        proc = self._proc
        if proc is None:
            self._cleanup_files()
            return
        try:
            process.stop(proc, timeout_s)
        finally:
            if self._reader is not None:
                self._reader.join(timeout=5.0)
                self._reader = None
            self._proc = None
            self._stubs = {}
            self._cleanup_files()
            if self._atexit_registered:
                atexit.unregister(self._atexit_stop)
                self._atexit_registered = False

    def _cleanup_files(self) -> None:
        if self._shm_prefix:
            process.remove_shared_memory(self._shm_prefix)
        if self._stub_env is not None:
            shutil.rmtree(self._stub_env, ignore_errors=True)
            self._stub_env = None

    def _atexit_stop(self) -> None:
        try:
            self.stop()
        except Exception:  # interpreter shutdown: never raise from atexit
            LOG.exception("stopping Triton at exit failed")
