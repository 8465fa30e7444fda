"""P4: the service for N minutes on 4 looping cameras; RSS over time, frame-to-event latency.

The service runs in its own process (``python -m bench.service_run``, so that its RSS is the
service's alone) against the suite's Triton. Four file cameras loop the whole clip in real
time (``realtime: true``: the decode thread paces by timestamps, the queue drops the oldest
waiting frame when inference falls behind, as with live cameras) at the demo's
``sample_fps``; ``dedup_window_s: 0`` so that every pass of the looping clip is reported (the
default 300 s window would report each plate once per camera). RSS of the service process and
of Triton's process tree are sampled with psutil; growth compares the median RSS of the last
10 % of the soak with that of the 10-20 % window (after start-up allocations).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from bench.common import PROJECT_ROOT, log, percentile, tree_rss_by_label
from bench.service_run import ServiceSpec, worker_command, write_config

SOAK_CAMERAS = 4
SOAK_SAMPLE_FPS = 5.0  # the demo's rate (configs/demo.yaml)
BASELINE_WINDOW = (0.10, 0.20)
END_WINDOW = (0.90, 1.00)
MIB = 2**20


def window(samples: list[tuple[float, float]], span: tuple[float, float], total: float) -> list:
    """Values of ``(t, value)`` samples with ``t`` inside ``span`` (fractions of ``total``)."""
    low, high = span[0] * total, span[1] * total
    return [v for t, v in samples if low <= t <= high]


def slope_mib_per_min(samples: list[tuple[float, float]], since: float, total: float) -> float:
    """Least-squares slope (MiB per minute) of ``(t, MiB)`` samples after ``since`` x ``total``.

    A leak shows as a steady slope over the second half; a one-off step (a new batch shape,
    the allocator's high-water mark) does not.
    """
    points = [(t / 60.0, v) for t, v in samples if since * total <= t <= total]
    if len(points) < 3:
        return float("nan")
    return statistics.linear_regression([t for t, _ in points], [v for _, v in points]).slope


def run_soak(
    clip: Path,
    triton_url: str,
    triton_pid: int | None,
    minutes: float,
    folder: Path,
    plot_path: Path | None,
    *,
    cameras: int = SOAK_CAMERAS,
    sample_fps: float = SOAK_SAMPLE_FPS,
    trace_allocations: bool = False,
) -> dict[str, Any]:
    duration = minutes * 60.0
    spec = ServiceSpec(
        [clip] * cameras,
        triton_url,
        sample_fps,
        realtime=True,
        events_extra={"dedup_window_s": 0},
    )
    config = write_config(spec, folder)
    out = folder / "soak-result.json"
    command = worker_command(
        config, duration, out, *(["--tracemalloc"] if trace_allocations else [])
    )
    interval = min(5.0, max(0.5, duration / 300))
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=PROJECT_ROOT, stdin=subprocess.DEVNULL)
    service = psutil.Process(proc.pid)
    rss: list[tuple[float, float]] = []
    triton_rss: list[tuple[float, float]] = []
    by_process: dict[str, list[tuple[float, float]]] = {}  # Triton's processes, per label
    cpu: list[tuple[float, float]] = []
    next_log = 60.0
    try:
        while proc.poll() is None:
            try:
                info = service.memory_info()
                times = service.cpu_times()
            except psutil.Error:
                break
            t = time.monotonic()
            rss.append((t, info.rss / MIB))
            cpu.append((t, times.user + times.system))
            labelled = tree_rss_by_label(triton_pid)
            triton_rss.append((t, sum(labelled.values()) / MIB))
            for label, value in labelled.items():
                by_process.setdefault(label, []).append((t, value / MIB))
            if t - started >= next_log:
                log(
                    f"P4 soak: {(t - started) / 60:.1f} of {minutes:g} min, "
                    f"service RSS {info.rss / MIB:.0f} MiB"
                )
                next_log += 60.0
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(interval)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"soak worker exited with {proc.returncode}")
    result = json.loads(out.read_text())
    # Windows on the service's own run: from its start to the stop request (shutdown excluded).
    begin = result["started_monotonic"]
    stop = result["stop_monotonic"] or (rss[-1][0] if rss else begin)
    span = stop - begin
    rss = [(t - begin, v) for t, v in rss if t >= begin]
    triton_rss = [(t - begin, v) for t, v in triton_rss if t >= begin]
    by_process = {
        label: [(t - begin, v) for t, v in series if t >= begin]
        for label, series in sorted(by_process.items())
    }
    cpu = [(t - begin, v) for t, v in cpu if begin <= t <= stop]
    base = window(rss, BASELINE_WINDOW, span)
    end = window(rss, END_WINDOW, span)
    tbase = window(triton_rss, BASELINE_WINDOW, span)
    tend = window(triton_rss, END_WINDOW, span)
    latencies = result.pop("event_latency_s")
    cpu_s = cpu[-1][1] - cpu[0][1] if len(cpu) > 1 else 0.0
    summary: dict[str, Any] = {
        **result,
        "minutes": minutes,
        "cameras": cameras,
        "sample_fps": sample_fps,
        "config": str(config),
        "interval_s": interval,
        "run_s": span,
        "rss_mib": rss,
        "triton_rss_mib": triton_rss,
        "rss_baseline_mib": base,
        "rss_end_mib": end,
        "triton_rss_baseline_mib": tbase,
        "triton_rss_end_mib": tend,
        "rss_slope_mib_per_min": slope_mib_per_min(rss, 0.5, span),
        "triton_rss_slope_mib_per_min": slope_mib_per_min(triton_rss, 0.5, span),
        "triton_rss_by_process_mib": by_process,
        "triton_rss_slope_by_process_mib_per_min": {
            label: slope_mib_per_min(series, 0.5, span) for label, series in by_process.items()
        },
        "event_latency_s": latencies,
        "latency_p50_s": percentile(latencies, 50),
        "latency_p99_s": percentile(latencies, 99),
        "frames_per_s": result["frames"] / span if span > 0 else 0.0,
        "service_cores_used": cpu_s / (cpu[-1][0] - cpu[0][0]) if len(cpu) > 1 else 0.0,
    }
    if plot_path is not None:
        plot(summary, plot_path)
        summary["plot"] = str(plot_path)
    return summary


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(9, 8.5), sharex=True)
    wall = summary["run_s"]

    def windows(ax: Any) -> None:
        for span, style in ((BASELINE_WINDOW, "baseline window"), (END_WINDOW, "end window")):
            ax.axvspan(span[0] * wall / 60, span[1] * wall / 60, alpha=0.12, label=style)
        ax.axvline(wall / 60, color="grey", ls="--", lw=0.8, label="stop (then shutdown)")
        ax.set_ylabel("RSS (MiB)")
        ax.grid(alpha=0.3)

    for ax, key, label in (
        (top, "rss_mib", "service process"),
        (middle, "triton_rss_mib", "Triton tree (server + model stubs, RSS summed)"),
    ):
        series = summary[key]
        ax.plot([t / 60 for t, _ in series], [v for _, v in series], lw=1.2, label=label)
        windows(ax)
        ax.legend(loc="lower right", fontsize=8)
    for label, series in summary.get("triton_rss_by_process_mib", {}).items():
        bottom.plot([t / 60 for t, _ in series], [v for _, v in series], lw=1.0, label=label)
    windows(bottom)
    bottom.set_title("Triton's processes (instances of a model summed)", fontsize=9)
    bottom.legend(loc="upper left", fontsize=7, ncol=3)
    bottom.set_xlabel("minutes")
    top.set_title(
        f"P4 soak: {summary['cameras']} cameras, sample_fps {summary['sample_fps']:g}, "
        f"{summary['minutes']:g} min"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
