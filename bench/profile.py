"""Where the time goes: py-spy profiles of the suite's workloads, summarised as text.

    .venv/bin/python -m bench.profile service [--cameras 4] [--seconds 3] [--native]
        [--realtime [--motion]]
    .venv/bin/python -m bench.profile seed    [--cameras 4] [--seconds 3]
    .venv/bin/python -m bench.profile bare    [--seconds 3]
    .venv/bin/python -m bench.profile ingest  [--copies 3]

``service`` and ``seed`` start an embedded Triton, warm it up, then attach ``py-spy record
--subprocesses`` to this process, so the samples cover the workload only: the service (or the
seed client) and Triton's Python-backend stubs (BLS, detector, stn, lprnet). ``bare`` and
``ingest`` run their worker under py-spy (start-up included). The collapsed stacks go to
``bench/results/profile-<target>-<stamp>.txt`` (open them in https://www.speedscope.app); the
summary (samples per process, the functions the samples end in) is printed.

``service --realtime``: the load of the overload ladder (phase O) instead: the cameras loop
the whole clip in real time at sample_fps 5 for ``--seconds`` (``--motion``: gating on, as
phase C).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import os
import re
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.common import PROJECT_ROOT, RESULTS_DIR, loop_clip, source_clip, trim_clip
from bench.params import load_params

MODEL_REPOSITORY = PROJECT_ROOT / "model_repository"
_COUNT = re.compile(r"^(.*) (\d+)$", re.DOTALL)
_PROCESS = re.compile(r'^process (\d+):"(.*)"$', re.DOTALL)
_MODEL = re.compile(r"model_repository/(\w+)/")


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise SystemExit("py-spy is not installed: .venv/bin/pip install -e '.[bench]'")
    return found


def _stacks(path: Path) -> Iterator[tuple[list[str], int]]:
    """(frames, count) of py-spy's raw output; a command line may span lines."""
    pending = ""
    for line in path.read_text(errors="replace").splitlines():
        pending = f"{pending}\n{line}" if pending else line
        match = _COUNT.match(pending)
        if match:
            yield match.group(1).split(";"), int(match.group(2))
            pending = ""


def _label(command: str) -> str:
    if "triton_python_backend_stub" in command:
        model = _MODEL.search(command)
        return f"Triton stub: {model.group(1) if model else '?'}"
    return "client process" if "python" in command else command[:40]


#: Leaves that are a thread waiting, not working. py-spy cannot tell idle threads apart in the
#: Triton stubs (embedded interpreters), so they are sorted out here: a thread-pool worker
#: waiting for work, an event loop in select, lock and condition waits. In the BLS stub,
#: ``_WorkItem.run`` with no Python frame below is ``async_exec`` blocked in C++ on a callee.
_WAITING = re.compile(
    r"^(_worker \(concurrent/futures/thread\.py|\w*Selector\.select|Condition\.wait"
    r"|Event\.wait|Thread\._wait_for_tstate_lock|_WorkItem\.run \(concurrent/futures/thread\.py:58)"
)


def summarise(path: Path, top: int = 15) -> str:
    per_process: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[tuple[str, str]] = collections.Counter()
    total = waiting = 0
    for frames, count in _stacks(path):
        label = "?"
        code = []
        for frame in frames:
            match = _PROCESS.match(frame)
            if match:
                label = _label(match.group(2))
            else:
                code.append(frame)
        leaf = code[-1] if code else "(no Python frame)"
        if _WAITING.match(leaf):
            waiting += count
            continue
        total += count
        per_process[label] += count
        leaves[(label, leaf)] += count
    if not total:
        return "no samples\n"
    out = [
        f"{total} samples of working threads ({waiting} more of threads waiting, left out)",
        "",
        "by process:",
    ]
    out += [f"  {100 * n / total:5.1f} %  {name}" for name, n in per_process.most_common()]
    out += ["", f"top {top} functions the samples end in (self time):"]
    out += [
        f"  {100 * n / total:5.1f} %  [{label}] {leaf}"
        for (label, leaf), n in leaves.most_common(top)
    ]
    return "\n".join(out) + "\n"


@contextlib.contextmanager
def attached(out: Path, rate: int, native: bool) -> Iterator[None]:
    """py-spy on this process and its descendants while the block runs."""
    command = [
        py_spy(),
        "record",
        "--pid",
        str(os.getpid()),
        "--subprocesses",
        "--rate",
        str(rate),
        "--format",
        "raw",
        "--output",
        str(out),
    ]
    if native:
        command.append("--native")
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)  # let it attach to every process
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="py-spy profile of a bench workload")
    parser.add_argument("target", choices=("service", "seed", "bare", "ingest"))
    parser.add_argument("--cameras", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=3.0, help="clip length (service/seed)")
    parser.add_argument("--copies", type=int, default=3, help="plays of the clip (ingest)")
    parser.add_argument("--rate", type=int, default=100, help="samples per second")
    parser.add_argument("--native", action="store_true", help="C/C++ frames too (slower)")
    parser.add_argument(
        "--realtime",
        action="store_true",
        help="service: real-time cameras looping the clip at 5 fps for --seconds (phase O)",
    )
    parser.add_argument("--motion", action="store_true", help="service --realtime: motion gate on")
    parser.add_argument("--out", type=Path, help="raw collapsed stacks")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or RESULTS_DIR / f"profile-{args.target}-{stamp}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="lpr-bench-profile-"))
    try:
        source = source_clip()
        if args.target in ("service", "seed"):
            from bench.seed_client import run_seed
            from bench.service_run import ServiceSpec, run_service
            from streamer.inference.embedded.server import EmbeddedTriton

            clip = trim_clip(source, args.seconds, work / "clip.ts")
            warm = trim_clip(source, 1.0, work / "warm.ts")
            params = load_params(MODEL_REPOSITORY)
            with EmbeddedTriton(MODEL_REPOSITORY) as triton:

                def workload(clips: list[Path]) -> dict[str, object]:
                    if args.target == "service" and args.realtime:
                        spec = ServiceSpec(
                            [source] * len(clips),
                            triton.grpc_url,
                            5.0,
                            realtime=True,
                            events_extra={"dedup_window_s": 0},
                            camera_extra={"motion": {"enabled": args.motion}},
                        )
                        folder = work / f"svc-{time.monotonic_ns()}"
                        seconds = args.seconds if clips[0] == clip else 5.0
                        return run_service(spec, folder, triton.pid, duration_s=seconds)
                    if args.target == "service":
                        spec = ServiceSpec(clips, triton.grpc_url, 15.0)
                        return run_service(spec, work / f"svc-{time.monotonic_ns()}", triton.pid)
                    return run_seed(triton.http_url, params, clips, 15.0)

                workload([warm] * args.cameras)
                with attached(out, args.rate, args.native):
                    result = workload([clip] * args.cameras)
            print(f"{args.target}: {result['frames']} frames, {result['frames_per_s']:.2f} fps")
        else:
            if args.target == "bare":
                from streamer.inference.embedded.environment import default_model_env

                clip = trim_clip(source, args.seconds, work / "clip.ts")
                env = default_model_env()
                python = str(env / "bin" / "python") if env else sys.executable
                worker = [python, str(PROJECT_ROOT / "bench" / "bare_loop.py"), "--clip", str(clip)]
                for directory in site.getsitepackages():
                    worker += ["--extra-site", directory]
            else:
                clip = loop_clip(source, args.copies, work / "clip.ts")
                worker = [sys.executable, "-m", "bench.ingest_cost", "--clip", str(clip)]
                worker += ["--mode", "ingest"]
            command = [py_spy(), "record", "--rate", str(args.rate), "--format", "raw"]
            command += ["--output", str(out), *(["--native"] if args.native else []), "--"]
            subprocess.run([*command, *worker], check=True, cwd=PROJECT_ROOT)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = summarise(out)
    print(text)
    summary = out.with_suffix(".summary.txt")
    summary.write_text(text)
    print(f"collapsed stacks: {out}\nsummary: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
