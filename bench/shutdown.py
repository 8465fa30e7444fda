"""How long the service takes to stop on SIGTERM: idle, during start-up, under overload.

    .venv/bin/python -m bench.shutdown [--runs 3] [--cameras 8] [--out FILE]

Each run starts ``python -m streamer run`` on a config of its own (embedded CPU Triton,
the shared yard clip looping in real time), sends SIGTERM at the chosen moment and times
until the process has exited (its Triton and stubs with it):

* ``idle``: one camera, 5 s after it connected;
* ``start-up``: 1 s after the embedded Triton began loading its models;
* ``overload``: ``--cameras`` cameras (8: more than this 2-core machine infers in real
  time, request_timeout_s 3), 20 s after the last one connected.

Target: <= 5 s (issue 14). Prints a Markdown table (median, min-max per case) and writes
the runs as JSON to ``--out`` (default bench/results/shutdown.json).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import PROJECT_ROOT, RESULTS_DIR, log, source_clip

TARGET_S = 5.0


def _config(folder: Path, cameras: int, overload: bool) -> Path:
    clip = source_clip()
    lines = ["cameras:"]
    lines += [f"  - {{name: cam{i}, url: '{clip}', sample_fps: 5}}" for i in range(cameras)]
    lines.append("triton: {request_timeout_s: 3}" if overload else "triton: {}")
    lines += ["events: {stdout: false}", "metrics: {port: 0}", "web: {enabled: false}"]
    path = folder / f"shutdown-{cameras}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def one_run(config: Path, marker: str, count: int, wait_s: float) -> float:
    """Start the service, SIGTERM ``wait_s`` after the ``count``-th ``marker`` line; seconds
    from the signal to the exit."""
    process = subprocess.Popen(
        [sys.executable, "-m", "streamer", "run", "--config", str(config)],
        cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    assert process.stderr is not None
    seen = 0
    for line in process.stderr:
        seen += marker in line
        if seen >= count:
            break
    else:
        raise RuntimeError(f"the service exited before {marker!r} x{count}")
    time.sleep(wait_s)
    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=120)
    took = time.monotonic() - signalled
    if process.returncode != 0:
        raise RuntimeError(f"the service exited with {process.returncode}")
    return took


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(prog="python -m bench.shutdown", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cameras", type=int, default=8)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "shutdown.json")
    args = parser.parse_args(argv)
    results: dict[str, list[float]] = {"idle": [], "start-up": [], "overload": []}
    with tempfile.TemporaryDirectory(prefix="lpr-shutdown-") as tmp:
        folder = Path(tmp)
        one = _config(folder, 1, overload=False)
        many = _config(folder, args.cameras, overload=True)
        for run in range(1, args.runs + 1):
            log(f"shutdown: run {run} of {args.runs}")
            results["idle"].append(one_run(one, "connected to", 1, 5.0))
            results["start-up"].append(one_run(one, "starting an embedded CPU Triton", 1, 1.0))
            results["overload"].append(one_run(many, "connected to", args.cameras, 20.0))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print("| case | median (s) | min-max (s) | runs | target <= 5 s |")
    print("| --- | --- | --- | --- | --- |")
    for case, times in results.items():
        median = statistics.median(times)
        verdict = "PASS" if median <= TARGET_S else "MISS"
        print(
            f"| {case} | {median:.1f} | {min(times):.1f}-{max(times):.1f} | {len(times)} "
            f"| {verdict} |"
        )
    return results


if __name__ == "__main__":
    main()
