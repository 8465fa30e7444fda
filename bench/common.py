"""Helpers shared by the side-by-side suite: statistics, clips, CPU accounting, run metadata."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from converters import assets
from streamer.foundation.paths import PROJECT_ROOT

RESULTS_DIR = PROJECT_ROOT / "bench" / "results"
CLIP_NAME = "yard_cam.ts"
CLIP_FPS = 15.0  # yard_cam.ts: 1920x1080 H.264, 15 fps, 8 s, one GOP


def log(message: str) -> None:
    """Progress on stderr (stdout carries the final table only)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- statistics ----------------------------------------------------------------------------


def summarize(samples: Sequence[float]) -> dict[str, Any]:
    """Median, quartiles, min and max of ``samples`` (kept raw too)."""
    values = sorted(float(s) for s in samples)
    if not values:
        return {"n": 0, "samples": []}
    if len(values) >= 2:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    else:
        q1 = q3 = values[0]
    return {
        "n": len(values),
        "median": statistics.median(values),
        "q1": q1,
        "q3": q3,
        "min": values[0],
        "max": values[-1],
        "samples": [float(s) for s in samples],
    }


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100, linear interpolation), None when empty."""
    data = sorted(values)
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


@dataclass
class Figure:
    """One row of the table: ``numerator / denominator``, medians of runs of the same suite.

    ``higher_is_better`` says how the ratio meets ``target`` (``>=`` or ``<=``). Per-round
    ratios (each numerator run over the denominator run of the same round) give the spread of
    the ratio; the ratio itself is median / median. ``failed_checks``: why the figure cannot
    pass whatever its ratio (an option whose texts differ from the baseline's is no faster
    way to the same answer): with any, a ratio that meets its target is still a MISS.
    """

    key: str
    title: str
    numerator: str
    denominator: str
    unit: str
    a: list[float]
    b: list[float]
    target: float | None
    higher_is_better: bool
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    failed_checks: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        if not self.a or not self.b:
            return None
        denominator = statistics.median(self.b)
        return statistics.median(self.a) / denominator if denominator else None

    @property
    def round_ratios(self) -> list[float]:
        return [x / y for x, y in zip(self.a, self.b, strict=False) if y]

    @property
    def verdict(self) -> str:
        ratio = self.ratio
        if not self.a and not self.b:
            return "n/a"
        if self.target is None:
            return "info"
        if ratio is None:
            return "n/a"
        met = ratio >= self.target if self.higher_is_better else ratio <= self.target
        return "PASS" if met and not self.failed_checks else "MISS"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Figure:
        """The inverse of :meth:`as_dict` (for re-rendering a results JSON)."""
        return cls(
            key=data["key"],
            title=data["title"],
            numerator=data["numerator"]["what"],
            denominator=data["denominator"]["what"],
            unit=data["unit"],
            a=list(data["numerator"].get("samples", [])),
            b=list(data["denominator"].get("samples", [])),
            target=data["target"],
            higher_is_better=data["target_op"] == ">=",
            notes=list(data["notes"]),
            extra=dict(data["extra"]),
            failed_checks=list(data.get("failed_checks", [])),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "numerator": {"what": self.numerator, **summarize(self.a)},
            "denominator": {"what": self.denominator, **summarize(self.b)},
            "unit": self.unit,
            "ratio": self.ratio,
            "round_ratios": self.round_ratios,
            "target": self.target,
            "target_op": ">=" if self.higher_is_better else "<=",
            "verdict": self.verdict,
            "notes": self.notes,
            "extra": self.extra,
            "failed_checks": self.failed_checks,
        }


# -- media ---------------------------------------------------------------------------------


def source_clip() -> Path:
    """yard_cam.ts, verified by sha256 (``python -m converters fetch`` puts it there)."""
    return assets.verify(assets.asset(CLIP_NAME), assets.default_assets_dir())


def ffmpeg(args: Sequence[str]) -> None:
    subprocess.run(
        ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *args],
        check=True,
        stdin=subprocess.DEVNULL,
    )


def trim_clip(source: Path, seconds: float, out: Path) -> Path:
    """The first ``seconds`` of ``source``, stream-copied (no re-encode: the same pictures)."""
    ffmpeg(["-i", str(source), "-t", f"{seconds:.3f}", "-c", "copy", "-f", "mpegts", str(out)])
    return out


def loop_clip(source: Path, copies: int, out: Path) -> Path:
    """``copies`` plays of ``source`` back to back, stream-copied, timestamps continuous."""
    ffmpeg(
        [
            "-stream_loop",
            str(copies - 1),
            "-i",
            str(source),
            "-c",
            "copy",
            "-f",
            "mpegts",
            str(out),
        ]
    )
    return out


def count_frames(path: Path) -> int:
    """Decoded video frames of ``path`` (PyAV, the decoder the service uses)."""
    import av

    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


# -- CPU accounting ------------------------------------------------------------------------


def self_cpu_s() -> float:
    """User + system CPU seconds of this process so far (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def tree_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a live process and its live descendants (0 if gone)."""
    if pid is None:
        return 0.0
    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


_MODEL_IN_COMMAND = re.compile(r"model_repository/(\w+)/")


def process_label(proc: psutil.Process) -> str:
    """``tritonserver``, ``stub:<model>`` (a Python-backend model's process) or the name."""
    try:
        command = " ".join(proc.cmdline())
        name = proc.name()
    except psutil.Error:
        return "?"
    if "triton_python_backend_stub" in command:
        model = _MODEL_IN_COMMAND.search(command)
        return f"stub:{model.group(1) if model else '?'}"
    return "tritonserver" if "tritonserver" in name else name


def _tree_by_label(pid: int | None, measure: Callable[[psutil.Process], float]) -> dict[str, float]:
    """``measure`` of each process of a tree, summed per :func:`process_label`."""
    if pid is None:
        return {}
    out: dict[str, float] = {}
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return {}
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            value = measure(proc)
            label = process_label(proc)
            out[label] = out.get(label, 0) + value
    return out


def _cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def tree_cpu_by_label(pid: int | None) -> dict[str, float]:
    """User + system CPU seconds of a process tree, per :func:`process_label`."""
    return _tree_by_label(pid, _cpu_seconds)


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after}


def tree_rss_by_label(pid: int | None) -> dict[str, float]:
    """RSS bytes of a process tree per :func:`process_label` (instances of a model summed)."""
    return _tree_by_label(pid, lambda proc: proc.memory_info().rss)


def run_with_rusage(
    command: Sequence[str], *, env: dict[str, str] | None = None
) -> tuple[int, float, float, str]:
    """Run ``command``; ``(exit code, wall s, user+system CPU s of it and its children, stdout)``.

    CPU comes from ``wait4``, so only this child (and what it waited for) is counted. Its
    stderr is kept aside and logged only when it fails.
    """
    with tempfile.TemporaryFile("w+") as errors:
        started = time.perf_counter()
        proc = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=errors,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=PROJECT_ROOT,
            text=True,
        )
        assert proc.stdout is not None
        try:
            out = proc.stdout.read()
        except BaseException:  # interrupted (SIGTERM from `timeout`, Ctrl-C): no orphan
            proc.kill()
            proc.wait()
            raise
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            errors.seek(0)
            tail = errors.read()[-3000:]
            log(f"{shlex.join(command)} exited with {proc.returncode}:\n{tail}")
    return proc.returncode, wall, usage.ru_utime + usage.ru_stime, out


# -- metadata ------------------------------------------------------------------------------


def git_commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}{' (dirty)' if dirty else ''}"


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def tool_version(command: Sequence[str]) -> str:
    try:
        out = subprocess.run(list(command), capture_output=True, text=True, check=False).stdout
    except OSError:
        return "missing"
    return out.splitlines()[0].strip() if out else "unknown"


def run_meta(argv: Sequence[str]) -> dict[str, Any]:
    import importlib.metadata

    import av

    try:
        tritonclient = importlib.metadata.version("tritonclient")
    except importlib.metadata.PackageNotFoundError:
        tritonclient = "unknown"
    return {
        "command": shlex.join(argv),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "pyav": av.__version__,
        "ffmpeg": " ".join(tool_version(["ffmpeg", "-version"]).split()[:3]),
        "tritonclient": tritonclient,
    }


def write_result(result: dict[str, Any], path: Path, argv: Sequence[str] | None) -> None:
    """A study's result as JSON at ``path``, with :func:`run_meta` of its command line."""
    result["meta"] = run_meta(sys.argv if argv is None else argv)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    log(f"wrote {path}")


def inference_counts(url: str, *models: str) -> dict[str, int]:
    """Requests each of ``models`` has executed so far on the Triton at ``url`` (its own
    statistics: ``inference_count``, every version): which model served the frames."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        counts = {}
        for model in models:
            stats = client.get_inference_statistics(model, as_json=True)["model_stats"]
            counts[model] = sum(int(s.get("inference_count", 0)) for s in stats)
        return counts
    finally:
        client.close()
