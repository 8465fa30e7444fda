"""P3: CPU seconds per decoded frame of the service's ingest against ``ffmpeg -f null``.

Worker (one process per measurement, so that only its own threads are counted)::

    python -m bench.ingest_cost --clip FILE --mode ingest|decode|decode_bgr [--sample-fps 5]

``ingest``: ``streamer.ingest.source.CameraSource`` reads the file as fast as possible
(``realtime=False``) at ``sample_fps`` into a ``FrameQueue(2, "wait")`` that an asyncio
consumer drains: everything the ingest does per frame (decode, sampling, BGR conversion and
copy of the kept frames, the hand-off). ``decode``: bare PyAV decoding, no conversion.
``decode_bgr``: PyAV decoding plus ``to_ndarray("bgr24")`` on every frame. All three decode
with ``thread_type = "AUTO"`` (the ingest's setting for files). CPU is ``getrusage(SELF)``
user + system around the measured part (imports and interpreter start-up excluded); one JSON
object on stdout.

The reference, ``ffmpeg -hide_banner -loglevel error -i FILE -f null -``, is measured by the
orchestrator with ``wait4`` (the whole process: start-up is a few ms against seconds of work).
Neither side is pinned to one thread: CPU seconds are summed over threads, and the cores each
used (CPU s / wall s) are reported next to them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import run_with_rusage, self_cpu_s

MODES = ("ingest", "decode", "decode_bgr")


def ffmpeg_null(clip: Path, frames: int) -> dict[str, Any]:
    """Debian's ffmpeg decoding ``clip`` to the null muxer; ``frames`` is the clip's count."""
    command = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-i", str(clip), "-f", "null", "-"]
    code, wall, cpu, _ = run_with_rusage(command)
    if code != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {code}")
    return _result(frames, frames, cpu, wall)


def worker(clip: Path, mode: str, sample_fps: float) -> dict[str, Any]:
    """Run one measurement as a child process; its JSON result."""
    command = [
        sys.executable,
        "-m",
        "bench.ingest_cost",
        "--clip",
        str(clip),
        "--mode",
        mode,
        "--sample-fps",
        str(sample_fps),
    ]
    code, _, _, out = run_with_rusage(command)
    if code != 0:
        raise RuntimeError(f"ingest_cost --mode {mode} exited with {code}")
    return dict(json.loads(out))


def _result(decoded: int, sampled: int, cpu: float, wall: float) -> dict[str, Any]:
    return {
        "decoded": decoded,
        "sampled": sampled,
        "cpu_s": cpu,
        "wall_s": wall,
        "cpu_ms_per_frame": 1e3 * cpu / decoded if decoded else 0.0,
        "cores_used": cpu / wall if wall > 0 else 0.0,
        "decode_fps": decoded / wall if wall > 0 else 0.0,
    }


def _ingest(clip: Path, sample_fps: float) -> dict[str, Any]:
    from streamer.ingest.frame_queue import FrameQueue
    from streamer.ingest.source import CameraSource

    async def run() -> dict[str, Any]:
        queue = FrameQueue(2, "wait")
        source = CameraSource(
            "bench",
            str(clip),
            sample_fps=sample_fps,
            realtime=False,
            loop_file=False,
            queue=queue,
            skip_non_reference=False,  # every frame decoded, as ffmpeg does: the same work
        )
        cpu0, started = self_cpu_s(), time.perf_counter()
        source.start()
        received = 0
        while (frame := await queue.get()) is not None:
            frame.image  # noqa: B018 - the BGR conversion, as the service does for a sent frame
            received += 1
        await source.astop()
        wall, cpu = time.perf_counter() - started, self_cpu_s() - cpu0
        if source.stats.last_error:
            raise RuntimeError(source.stats.last_error)
        result = _result(source.stats.decoded, received, cpu, wall)
        result["decode_errors"] = source.stats.decode_errors
        return result

    return asyncio.run(run())


def _decode(clip: Path, convert: bool) -> dict[str, Any]:
    import av

    cpu0, started = self_cpu_s(), time.perf_counter()
    decoded = 0
    with av.open(str(clip)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for frame in container.decode(stream):
            decoded += 1
            if convert:
                frame.to_ndarray(format="bgr24")
    wall, cpu = time.perf_counter() - started, self_cpu_s() - cpu0
    return _result(decoded, decoded if convert else 0, cpu, wall)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one P3 measurement (worker)")
    parser.add_argument("--clip", type=Path, required=True)
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--sample-fps", type=float, default=5.0)
    args = parser.parse_args(argv)
    if args.mode == "ingest":
        result = _ingest(args.clip, args.sample_fps)
    else:
        result = _decode(args.clip, convert=args.mode == "decode_bgr")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
