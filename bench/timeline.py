"""A service worker run with a timeline, and what the capacity phases read from it.

:func:`run_worker` starts ``python -m bench.service_run --sample-every T`` (the service in its
own process, so that its RSS and CPU are its own) against the suite's Triton and returns the
worker's JSON: counters, a timeline of samples (``t`` in ``time.monotonic()``, the same clock
in every process), every answer's time at Triton and from capture to answer, and every event.

The rest are pure functions of that JSON (tested on recorded results): a *window* is the part
of the run after its warm-up, from the first sample at or after ``started + warmup_s`` to the
last sample at or before the stop, so counters are differences between two samples and rates
divide by the time between them.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import log, percentile, run_with_rusage
from bench.service_run import ServiceSpec, worker_command, write_config

#: RSS growth compares the median of the last 15 % of the window with its first 15 %.
RSS_EDGE = 0.15
#: Per-camera counters in a sample (bench/service_run.py's ``_per_camera``).
COUNTERS = (
    "answered",
    "sent",
    "failed",
    "superseded",
    "decoded",
    "sampled",
    "skipped_no_motion",
    "dropped",
)


def sample_interval(measure_s: float) -> float:
    """About 60 samples over the measured part, every 0.5-2 s."""
    return min(2.0, max(0.5, measure_s / 60))


def run_worker(
    spec: ServiceSpec,
    folder: Path,
    triton_pid: int | None,
    duration_s: float,
    sample_every_s: float,
) -> dict[str, Any]:
    """One worker run of ``duration_s`` seconds; its JSON (raises if it failed)."""
    config = write_config(spec, folder)
    out = folder / "worker-result.json"
    command = worker_command(config, duration_s, out, "--sample-every", f"{sample_every_s:g}")
    if triton_pid is not None:
        command += ["--triton-pid", str(triton_pid)]
    code, wall, cpu, _ = run_with_rusage(command)
    if code != 0:
        raise RuntimeError(f"service worker exited with {code} ({folder})")
    result: dict[str, Any] = json.loads(out.read_text())
    result["process_wall_s"] = wall
    result["process_cpu_s"] = cpu
    result["config"] = str(config)
    return result


@dataclass(frozen=True)
class Window:
    """The measured part of a worker run: two samples of its timeline."""

    first: dict[str, Any]
    last: dict[str, Any]

    @property
    def t0(self) -> float:
        return float(self.first["t"])

    @property
    def t1(self) -> float:
        return float(self.last["t"])

    @property
    def span_s(self) -> float:
        return self.t1 - self.t0

    def contains(self, t: float) -> bool:
        return self.t0 <= t <= self.t1

    def per_camera(self, counter: str) -> dict[str, int]:
        """How much ``counter`` grew on each camera inside the window."""
        before = self.first["cameras"]
        return {
            name: values[counter] - before.get(name, {}).get(counter, 0)
            for name, values in self.last["cameras"].items()
        }

    def total(self, counter: str) -> int:
        return sum(self.per_camera(counter).values())

    def delta(self, key: str) -> float:
        """Growth of a process-level sample (``cpu_s``, ``triton_cpu_s``)."""
        return float(self.last[key]) - float(self.first[key])

    def recognizer(self, key: str) -> int:
        return int(self.last["recognizer"].get(key, 0)) - int(self.first["recognizer"].get(key, 0))


def window(result: dict[str, Any], warmup_s: float) -> Window:
    """The window of a worker run after ``warmup_s`` seconds from its start."""
    timeline = result["timeline"]
    if len(timeline) < 2:
        raise ValueError(f"a timeline of {len(timeline)} sample(s) has no window")
    begin = float(result["started_monotonic"]) + warmup_s
    stop = result.get("stop_monotonic") or timeline[-1]["t"]
    inside = [s for s in timeline if begin <= s["t"] <= stop]
    if len(inside) < 2:  # a very short run: its last two samples before the stop
        inside = [s for s in timeline if s["t"] <= stop][-2:] or timeline[-2:]
    return Window(inside[0], inside[-1])


def samples_in(result: dict[str, Any], win: Window, key: str) -> list[tuple[float, float]]:
    """``(t - start of the window, value)`` of a process-level key inside the window."""
    return [(s["t"] - win.t0, float(s[key])) for s in result["timeline"] if win.contains(s["t"])]


def rss_edges(result: dict[str, Any], win: Window, key: str) -> tuple[list[float], list[float]]:
    """RSS samples (MiB) of the first and the last ``RSS_EDGE`` of the window."""
    series = samples_in(result, win, key)
    span = win.span_s
    start = [v for t, v in series if t <= RSS_EDGE * span] or [series[0][1]]
    end = [v for t, v in series if t >= (1 - RSS_EDGE) * span] or [series[-1][1]]
    return start, end


def latencies_in(result: dict[str, Any], win: Window) -> list[float]:
    """Times at Triton (s) of the answers that came inside the window."""
    return [float(s) for t, s in result.get("latencies", []) if win.contains(t)]


def captures_in(result: dict[str, Any], win: Window) -> list[float]:
    """Times from capture to answer (s) of the answers that came inside the window."""
    return [float(s) for t, s in result.get("captures", []) if win.contains(t)]


def events_in(result: dict[str, Any], win: Window) -> list[tuple[str, str]]:
    """``(camera, text)`` of the events published inside the window."""
    return [(camera, text) for t, camera, text, _ in result.get("event_log", []) if win.contains(t)]


def window_limits(result: dict[str, Any], win: Window) -> list[int]:
    return [
        int(s["window_limit"])
        for s in result["timeline"]
        if win.contains(s["t"]) and s.get("window_limit") is not None
    ]


def summarize_run(
    result: dict[str, Any], warmup_s: float, true_texts: frozenset[str]
) -> dict[str, Any]:
    """What every capacity figure reads of one worker run (kept in the raw JSON)."""
    win = window(result, warmup_s)
    answered = win.per_camera("answered")
    span = win.span_s
    latencies = latencies_in(result, win)
    captures = captures_in(result, win)
    events = events_in(result, win)
    rss_start, rss_end = rss_edges(result, win, "rss_mib")
    triton_start, triton_end = rss_edges(result, win, "triton_rss_mib")
    limits = window_limits(result, win)
    return {
        "window_s": span,
        "warmup_s": warmup_s,
        "cameras": len(answered),
        "answered": sum(answered.values()),
        "answered_per_camera": answered,
        "per_camera": {
            name: {counter: win.per_camera(counter)[name] for counter in COUNTERS}
            for name in answered
        },
        "answered_fps": sum(answered.values()) / span if span > 0 else 0.0,
        "sampled_fps": win.total("sampled") / span if span > 0 else 0.0,
        "gated_fps": win.total("skipped_no_motion") / span if span > 0 else 0.0,
        "sampled": win.total("sampled"),
        "skipped_no_motion": win.total("skipped_no_motion"),
        "sent": win.total("sent"),
        "failed": win.total("failed"),
        "superseded": win.total("superseded"),
        "dropped": win.total("dropped"),
        "decoded": win.total("decoded"),
        "timed_out": win.recognizer("timed_out"),
        "late": win.recognizer("late"),
        "resets": win.recognizer("resets"),
        "latency_p50_s": percentile(latencies, 50),
        "latency_p99_s": percentile(latencies, 99),
        "latency_median_s": statistics.median(latencies) if latencies else None,
        "latencies": len(latencies),
        "capture_p50_s": percentile(captures, 50),
        "capture_p99_s": percentile(captures, 99),
        "captures": len(captures),
        "events": len(events),
        "event_texts": sorted({text for _, text in events}),
        "wrong_text_events": sum(1 for _, text in events if text not in true_texts),
        "rss_start_mib": rss_start,
        "rss_end_mib": rss_end,
        "triton_rss_start_mib": triton_start,
        "triton_rss_end_mib": triton_end,
        "service_cpu_s": win.delta("cpu_s"),
        "triton_cpu_s": win.delta("triton_cpu_s"),
        "window_limit_median": statistics.median(limits) if limits else None,
        "window_limit_max": max(limits) if limits else None,
        "camera_errors": result.get("camera_errors", []),
    }


def describe(summary: dict[str, Any]) -> str:
    """One log line about a summarised run."""
    p99, capture = summary["latency_p99_s"], summary.get("capture_p99_s")
    return (
        f"{summary['cameras']} camera(s): {summary['answered_fps']:.2f} answered frames/s over "
        f"{summary['window_s']:.0f} s, p99 at Triton "
        + (f"{p99:.2f} s" if p99 is not None else "-")
        + ", p99 capture to answer "
        + (f"{capture:.2f} s" if capture is not None else "-")
        + f", failed {summary['failed']}, events {summary['events']}"
    )


def logged(summary: dict[str, Any], label: str) -> dict[str, Any]:
    log(f"{label}: {describe(summary)}")
    return summary
