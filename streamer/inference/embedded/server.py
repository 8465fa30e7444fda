"""Embedded Triton Inference Server: the ``tritonserver`` of the ``nvidia-pytriton`` wheel.

Usage::

    with EmbeddedTriton(Path("model_repository")) as server:
        client = tritonclient.grpc.InferenceServerClient(server.grpc_url)

The wheel (``nvidia-pytriton==0.7.0``, Triton 2.51) carries the server binary, the Python
backend and one Python-backend stub per Python version. The server tree is copied once into a
cache folder (the stub for the running interpreter goes into ``backends/python``), and every
server is bound to 127.0.0.1 on free ports, in its own process group, with a parent-death
signal, so that no ``tritonserver``, stub process or ``/dev/shm`` region outlives its owner.

How the stub finds packages (checked empirically, Triton 2.51 / Debian 12 / pyenv 3.11 venv):

* The stub embeds the *system* ``libpython3.X.so`` with ``PyConfig_InitIsolatedConfig``:
  ``PYTHONPATH``, ``PYTHONHOME`` and the user site are ignored. Its ``sys.prefix`` comes from
  the first ``python3`` on ``PATH`` (CPython's getpath), plus a ``pyvenv.cfg`` next to it.
* Putting the venv's ``bin`` first on ``PATH`` makes the stub load the venv's site-packages,
  but also the *base interpreter's* stdlib (pyenv 3.11.7) on the system libpython (3.11.2):
  ``import ssl`` then fails (``undefined symbol: _PyModule_Add``).
* So each server gets a tiny fake venv (see :func:`_make_stub_env`): ``bin/python3`` plus a
  ``pyvenv.cfg`` whose ``home`` is the system Python's, so the stdlib matches the stub's
  libpython, and a ``.pth`` file that adds this interpreter's site directories (``.pth`` files,
  editable installs included) and ``PYTHONPATH``. Models then import torch and numpy from the
  venv that started the server.

Pitfall (numpy >= 2): the stub's C++ tensor bridge was built against numpy 1.x. With numpy 2
in the stub, ``Tensor.as_numpy()`` reads zeros and ``pb_utils.Tensor(name, ndarray)`` outputs
are empty, silently. Move tensors with DLPack (``to_dlpack``/``Tensor.from_dlpack`` with torch),
which works, or put a folder holding numpy<2 first with ``stub_python_paths``. A warning is
logged at start when the stub would see numpy >= 2.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import ctypes
import importlib.metadata
import importlib.util
import logging
import os
import re
import secrets
import shlex
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from streamer.ops.paths import PROJECT_MODEL_ENV

_LOG = logging.getLogger(__name__)

HOST = "127.0.0.1"
TRITON_VERSION = "2.51"
_EXIT_TIMEOUT_S = 10
_LOG_KEEP = 200
_ERROR_TAIL = 40
_PR_SET_PDEATHSIG = 1
_SHM_DIR = Path("/dev/shm")
_TREE_MARKER = ".lpr-streamer-tree"
_STUB_ENV_PREFIX = "lpr-triton-stubenv-"
_PORT_ATTEMPTS = 3
# Lines that a CPU-only machine always prints at start: logged at DEBUG.
_HARMLESS = re.compile(
    r"NVML|DCGM|CudaDriverHelper|pinned system memory|CUDA driver version is insufficient"
    r"|CUDA memory pool|cuda_memory_manager|GPU metrics"
)
_PORT_IN_USE = re.compile(r"Socket '[^']*:(\d+)' already in use")
_TABLE_RULE = re.compile(r"^\+-+\+")  # the +----+ rules of the startup tables
_TRITON_LINE = re.compile(r"^([EWI])\d{4} ")
_LEVELS = {"E": logging.ERROR, "W": logging.WARNING, "I": logging.INFO}


class TritonStartError(RuntimeError):
    """The server could not be started or did not become ready in time."""


def default_work_dir() -> Path:
    """Cache folder for the copied server tree (one per Python minor version)."""
    cache = os.environ.get("XDG_CACHE_HOME") or ""
    base = Path(cache) if cache and Path(cache).is_absolute() else Path.home() / ".cache"
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    return base / "lpr-streamer" / f"tritonserver-{TRITON_VERSION}-py{py}"


def wheel_server_dir() -> Path:
    """The ``pytriton/tritonserver`` folder of the installed ``nvidia-pytriton`` wheel."""
    spec = importlib.util.find_spec("pytriton")  # locates without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise TritonStartError("nvidia-pytriton is not installed (pip install --no-deps ...)")
    server = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    if not (server / "bin" / "tritonserver").is_file():
        raise TritonStartError(f"no bin/tritonserver under {server}")
    return server


def prepare_server_tree(work_dir: Path, source: Path | None = None) -> Path:
    """Copy the wheel's server tree plus this Python's backend stub to ``work_dir`` once.

    The copy goes to a temporary sibling that is renamed into place, so concurrent or
    interrupted runs never see half a tree; a complete tree is reused.
    """
    source = source or wheel_server_dir()
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = source / "python_backend_stubs" / py / "triton_python_backend_stub"
    if not stub.is_file():
        raise TritonStartError(f"the wheel has no Python backend stub for Python {py}: {stub}")
    try:
        wheel_version = importlib.metadata.version("nvidia-pytriton")
    except importlib.metadata.PackageNotFoundError:
        wheel_version = "unknown"
    fingerprint = (
        f"nvidia-pytriton {wheel_version}\n"
        f"stub python{py} {stub.stat().st_size}\n"
        f"tritonserver {(source / 'bin' / 'tritonserver').stat().st_size}\n"
    )
    src = str(source)
    work_dir = work_dir.expanduser().absolute()
    if _tree_matches(work_dir, fingerprint):
        return work_dir
    work_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{work_dir.name}.tmp-", dir=work_dir.parent))
    try:
        shutil.copytree(
            source,
            tmp,
            dirs_exist_ok=True,
            symlinks=True,
            ignore=lambda d, names: [
                n for n in names if n == "__pycache__" or (n == "python_backend_stubs" and d == src)
            ],
        )
        shutil.copy2(stub, tmp / "backends" / "python" / stub.name)
        (tmp / _TREE_MARKER).write_text(fingerprint)
        try:
            tmp.rename(work_dir)
            _LOG.info("copied the Triton server tree to %s", work_dir)
        except OSError:
            if not work_dir.exists():
                raise
            # Another process won the race (or a foreign folder is in the way).
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not _tree_matches(work_dir, fingerprint):
        raise TritonStartError(
            f"{work_dir} exists but does not hold this wheel's server tree "
            f"(no matching {_TREE_MARKER}); delete it or pass another work_dir"
        )
    return work_dir


def _tree_matches(work_dir: Path, fingerprint: str) -> bool:
    try:
        return (work_dir / _TREE_MARKER).read_text() == fingerprint
    except OSError:
        return False


def _free_ports(count: int) -> list[int]:
    """Ports the kernel hands out for 127.0.0.1 (all held until all are chosen, then freed)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _system_python_home(minor: str) -> str:
    """``home`` for the stub's pyvenv.cfg: where the system libpython's stdlib lives.

    The stub links the distribution's ``libpython3.X.so`` (``/usr`` prefix on Debian/Ubuntu);
    pointing ``home`` there makes the stub use the stdlib that matches its C core.
    """
    for prefix in ("/usr", "/usr/local"):
        if Path(prefix, "lib", f"python{minor}", "os.py").is_file():
            return f"{prefix}/bin"
    return str(Path(sys._base_executable).parent)  # best effort: our own base interpreter


def _stub_site_dirs() -> list[str]:
    """Site directories of the running interpreter (their ``.pth`` files are honoured)."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dirs if Path(d).is_dir()]


def _make_stub_env(root: Path, front: Sequence[str], site_dirs: Sequence[str]) -> Path:
    """Create the fake venv that makes the stub see our packages; returns its ``bin``."""
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    bindir = root / "bin"
    bindir.mkdir(parents=True)
    # getpath only needs an executable file named python3; running it runs this interpreter.
    python3 = bindir / "python3"
    python3.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python3.chmod(0o755)
    (root / "pyvenv.cfg").write_text(
        f"home = {_system_python_home(minor)}\n"
        "include-system-site-packages = false\n"
        f"version = {minor}\n"
    )
    sp = root / "lib" / f"python{minor}" / "site-packages"
    sp.mkdir(parents=True)
    (sp / "_lpr_streamer_parent_env.pth").write_text(
        f"import sys, site; sys.path[0:0] = {list(front)!r}; "
        f"list(map(site.addsitedir, {list(site_dirs)!r}))\n"
    )
    return bindir


def _sweep_stub_envs() -> None:
    """Remove stub envs of dead processes (left when an owner was SIGKILLed)."""
    for path in Path(tempfile.gettempdir()).glob(f"{_STUB_ENV_PREFIX}*-*"):
        owner = path.name[len(_STUB_ENV_PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and not _alive(int(owner)):
            shutil.rmtree(path, ignore_errors=True)


MODEL_ENV_VAR = "LPR_TRITON_PYTHON_ENV"


def default_model_env() -> Path | None:
    """The models' virtualenv: ``$LPR_TRITON_PYTHON_ENV``, else the project's ``.venv-triton``.

    ``make setup`` creates ``.venv-triton`` with numpy<2 (see the module docstring),
    torch for TorchScript and OpenCV. None when neither exists.
    """
    configured = os.environ.get(MODEL_ENV_VAR)
    if configured:
        return Path(configured)
    return PROJECT_MODEL_ENV if PROJECT_MODEL_ENV.is_dir() else None


def _venv_site_dirs(env: Path) -> list[str]:
    """site-packages of a virtualenv made for this Python version."""
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site_packages = env / "lib" / minor / "site-packages"
    if not site_packages.is_dir():
        raise TritonStartError(
            f"{env} is not a {minor} virtualenv (no {site_packages}); "
            f"set {MODEL_ENV_VAR} or run `make setup`"
        )
    return [str(site_packages)]


def _stub_numpy_version(search: Sequence[str]) -> str | None:
    """Version of the numpy the stub will import first from ``search``, if any."""
    for dist in importlib.metadata.distributions(name="numpy", path=list(search)):
        return dist.version
    return None


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) of a process, or None when it is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2])


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _proc_stat(int(entry.name))
            if stat is not None and stat[2] == pgid and stat[0] != "Z":
                members.append(int(entry.name))
    return members


def _pdeathsig_preexec() -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child get SIGTERM when our process dies.

    libc is resolved before fork; the child only calls it. If we died between fork and
    prctl, the child notices a new parent and exits.
    """
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()
    sig = int(signal.SIGTERM)

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


class EmbeddedTriton:
    """A ``tritonserver`` child process serving ``model_repository`` on 127.0.0.1.

    ``start()`` blocks until ``/v2/health/ready`` answers 200 (every model loaded); a failure
    raises :class:`TritonStartError` with the tail of the server log. ``stop()`` is idempotent.
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
        self._reader: threading.Thread | None = None
        self._stub_env: Path | None = None
        self._shm_prefix = ""
        self._lines: collections.deque[str] = collections.deque(maxlen=_LOG_KEEP)
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
        return proc is not None and proc.returncode is None and _alive(proc.pid)

    @property
    def exit_code(self) -> int | None:
        """The exit code of a server that has exited (negative: the signal), else None."""
        proc = self._proc
        return _exit_code(proc) if proc is not None else None

    @property
    def shm_prefix(self) -> str:
        """Prefix of this server's Python-backend regions in /dev/shm ('' before start)."""
        return self._shm_prefix

    def log_tail(self, n: int = _ERROR_TAIL) -> list[str]:
        """The last ``n`` lines the server printed."""
        return list(self._lines)[-n:]

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
            for attempt in range(1, attempts + 1):
                self._launch(tree)
                try:
                    self._wait_ready(deadline)
                    _LOG.info(
                        "Triton ready (pid %s): grpc %s, http %s",
                        self.pid,
                        self.grpc_url,
                        self.http_url,
                    )
                    return
                except BaseException as exc:  # KeyboardInterrupt too: never leave it running
                    tail = "\n".join(self.log_tail())
                    self._stop_locked(timeout_s=10.0)
                    retry = isinstance(exc, TritonStartError) and not self._cancel.is_set()
                    taken = {int(p) for p in _PORT_IN_USE.findall(tail)}
                    fixed = {p for p in self._requested_ports if p is not None}
                    if retry and attempt < attempts and taken and not taken & fixed:
                        _LOG.warning("port taken while starting Triton, retrying: %s", attempt)
                        continue
                    raise

    def stop(self, timeout_s: float = 30.0) -> None:
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

    async def astop(self, timeout_s: float = 30.0) -> None:
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
            free = iter(_free_ports(3))
            grpc_port = grpc_port or next(free)
            http_port = http_port or next(free)
            metrics_port = metrics_port or next(free)
        assert grpc_port and http_port and metrics_port
        self._ports = (grpc_port, http_port, metrics_port)
        self._shm_prefix = f"lpr_triton_{os.getpid()}_{secrets.token_hex(4)}_"
        self._lines.clear()

        libs = wheel_server_dir().parent.parent / "nvidia_pytriton.libs"
        front = [str(p) for p in self.stub_python_paths]
        front += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        site_dirs = _venv_site_dirs(self.python_env) if self.python_env else _stub_site_dirs()
        _sweep_stub_envs()
        self._stub_env = Path(tempfile.mkdtemp(prefix=f"{_STUB_ENV_PREFIX}{os.getpid()}-"))
        stub_bin = _make_stub_env(self._stub_env, front, site_dirs)
        numpy_version = _stub_numpy_version([*front, *site_dirs])
        if numpy_version is None:
            _LOG.warning("no numpy for the Python backend stub; models will fail to load")
        elif int(numpy_version.split(".")[0]) >= 2:
            _LOG.warning(
                "numpy %s in the Python backend stub: Triton %s's as_numpy()/Tensor(ndarray) "
                "silently corrupt tensors under numpy>=2; use DLPack, or stub_python_paths "
                "with numpy<2",
                numpy_version,
                TRITON_VERSION,
            )

        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(libs), env.get("LD_LIBRARY_PATH", "")) if p
        )
        env["PATH"] = os.pathsep.join(p for p in (str(stub_bin), env.get("PATH", "")) if p)
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
            f"--backend-config=python,shm-region-prefix-name={self._shm_prefix}",
            f"--log-verbose={self.log_verbose}",
            *self.extra_args,
        ]
        _LOG.info("starting %s", shlex.join(cmd))

        # The process is spawned by the long-lived reader thread, not by the caller's thread:
        # PR_SET_PDEATHSIG fires when the *thread* that forked exits (an asyncio.to_thread
        # worker, say), and the reader thread lives exactly as long as the server's output.
        spawned = threading.Event()
        box: dict[str, subprocess.Popen[bytes] | BaseException] = {}
        preexec = _pdeathsig_preexec()

        def run() -> None:
            try:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,  # own group: a terminal Ctrl-C does not reach it
                    preexec_fn=preexec,
                )
            except BaseException as exc:
                box["error"] = exc
                spawned.set()
                return
            box["proc"] = proc
            spawned.set()
            assert proc.stdout is not None
            self._pump(proc.stdout)

        self._reader = threading.Thread(target=run, name="tritonserver-log", daemon=True)
        self._reader.start()
        spawned.wait()
        if "error" in box:
            self._cleanup_files()
            raise TritonStartError(f"cannot run {cmd[0]}: {box['error']}")
        proc = box["proc"]
        assert isinstance(proc, subprocess.Popen)
        self._proc = proc
        if not self._atexit_registered:
            atexit.register(self._atexit_stop)
            self._atexit_registered = True

    def _pump(self, stream: IO[bytes]) -> None:
        """Forward server output to the logger and keep the tail."""
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip()
            if not line:
                continue
            self._lines.append(line)
            match = _TRITON_LINE.match(line)
            level = _LEVELS[match.group(1)] if match else logging.INFO
            if _HARMLESS.search(line):
                level = logging.DEBUG
            _LOG.log(level, "tritonserver: %s", line)
        stream.close()

    def _wait_ready(self, deadline: float) -> None:
        proc = self._proc
        assert proc is not None
        url = f"http://{self.http_url}/v2/health/ready"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while True:
            if _leader_exited(proc):
                code = _exit_code(proc)
                if self._reader is not None:
                    self._reader.join(timeout=2.0)  # collect the last lines
                raise TritonStartError(
                    f"tritonserver exited with code {code} before it was ready "
                    f"({self.model_repository})\n{self._failure_summary()}"
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
                raise TritonStartError(
                    f"tritonserver not ready after {self.startup_timeout_s:.0f} s "
                    f"({self.model_repository})\n{self._failure_summary()}"
                )
            time.sleep(0.1)

    def _failure_summary(self) -> str:
        """Error lines of the log (model load failures name the model), then its tail."""
        lines = list(self._lines)
        errors = [ln[:1000] for ln in lines if ln.startswith("E") and not _HARMLESS.search(ln)]
        tail = [ln for ln in lines if not _TABLE_RULE.match(ln)][-_ERROR_TAIL:]
        parts = []
        if errors:
            parts.append("errors:\n" + "\n".join(errors[-10:]))
        parts.append("last log lines:\n" + "\n".join(tail))
        return "\n".join(parts)

    def _stop_locked(self, timeout_s: float) -> None:
        proc = self._proc
        if proc is None:
            self._cleanup_files()
            return
        try:
            if not _leader_exited(proc):
                _LOG.info("stopping Triton (pid %s)", proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
                if not _wait_leader(proc, timeout_s):
                    # It holds no state: a kill loses nothing (the service stops it with a
                    # 2 s budget, shorter than its models take to unload).
                    _LOG.info("Triton still stopping after %.0f s: killing its group", timeout_s)
                    _killpg(proc.pid)
                    _wait_leader(proc, 5.0)
            # The leader is a zombie (not reaped yet), so its group id cannot be reused:
            # kill stub processes it left behind (e.g. stopped while models were loading).
            leftovers = [p for p in _group_members(proc.pid) if p != proc.pid]
            if leftovers:
                _LOG.warning("killing processes Triton left behind: %s", leftovers)
                _killpg(proc.pid)
                end = time.monotonic() + 5.0
                while _group_members(proc.pid) and time.monotonic() < end:
                    time.sleep(0.05)
            proc.wait()
            _LOG.info("Triton stopped (pid %s, exit code %s)", proc.pid, proc.returncode)
        finally:
            if self._reader is not None:
                self._reader.join(timeout=5.0)
                self._reader = None
            self._proc = None
            self._cleanup_files()
            if self._atexit_registered:
                atexit.unregister(self._atexit_stop)
                self._atexit_registered = False

    def _cleanup_files(self) -> None:
        if self._shm_prefix:
            left = sorted(_SHM_DIR.glob(f"{self._shm_prefix}*"))
            for path in left:
                path.unlink(missing_ok=True)
            if left:
                _LOG.info("removed %s leftover shared-memory regions", len(left))
        if self._stub_env is not None:
            shutil.rmtree(self._stub_env, ignore_errors=True)
            self._stub_env = None

    def _atexit_stop(self) -> None:
        try:
            self.stop(timeout_s=_EXIT_TIMEOUT_S + 5)
        except Exception:  # interpreter shutdown: never raise from atexit
            _LOG.exception("stopping Triton at exit failed")


def _alive(pid: int) -> bool:
    stat = _proc_stat(pid)
    return stat is not None and stat[0] != "Z"


def _exit_code(proc: subprocess.Popen[bytes]) -> int | None:
    """Exit code (negative signal number if killed) of an exited server, without reaping it."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _leader_exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the server exited, without reaping it (its pid stays reserved)."""
    if proc.returncode is not None:
        return True
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _wait_leader(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while not _leader_exited(proc):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
