"""Memory under overload: N real-time cameras with a short deadline, RSS over time.

    .venv/bin/python -m bench.overload_memory [--cameras 8] [--seconds 60] [--timeout 3]
        [--checkout DIR]

Runs ``Service`` in this process on N real-time file cameras looping yard_cam.ts at 5 fps
(the motion gate off: every sampled frame is offered), ``triton.request_timeout_s`` =
``--timeout``, the embedded CPU Triton on the checkout's ``model_repository/``; every 10 s
prints the frames answered so far and the RSS of the service and of the Triton tree
(tritonserver and its stub processes). ``--checkout DIR`` runs another checkout's
``streamer`` (e.g. ``git worktree add /tmp/old 718fca7`` and its own ``make models``) to
compare before and after; set ``LPR_TRITON_PYTHON_ENV`` to this project's ``.venv-triton``
for it. The figures are in docs/production.md, "Memory under overload".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import psutil

SAMPLE_S = 10.0


def tree_rss_mib(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cameras", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--timeout", type=float, default=3.0, help="triton.request_timeout_s")
    parser.add_argument("--checkout", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    checkout = args.checkout.resolve()
    sys.path.insert(0, str(checkout))
    # Imported from the checkout under test.
    from converters import assets
    from streamer.app import Service
    from streamer.config import load_config

    clip = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
    cameras = "\n".join(
        f"  - {{name: cam{i}, url: '{clip}', sample_fps: 5, realtime: true}}"
        for i in range(args.cameras)
    )
    config = Path(f"/tmp/lpr-overload-memory-{args.cameras}.yaml")
    config.write_text(
        f"cameras:\n{cameras}\n"
        f"triton: {{request_timeout_s: {args.timeout}, "
        f"model_repository: '{checkout / 'model_repository'}'}}\n"
        "events: {stdout: false}\nmetrics: {enabled: false}\nweb: {enabled: false}\n"
    )
    settings = load_config(config)
    try:  # as `streamer run` does at start (older checkouts have no allocator settings)
        from streamer.foundation.allocator import tune_allocator

        tune_allocator()
    except ImportError:
        pass
    for camera in settings.cameras:  # older checkouts have no motion gate
        motion = getattr(camera, "motion", None)
        if motion is not None:
            object.__setattr__(motion, "enabled", False)

    async def run() -> list[dict[str, Any]]:
        service = Service(settings)
        runner = asyncio.create_task(service.run())
        while service.recognizer is None or not service.recognizer.ready or not service.cameras:
            if runner.done():
                runner.result()
            await asyncio.sleep(0.2)
        started, rows = time.monotonic(), []
        while time.monotonic() - started < args.seconds:
            await asyncio.sleep(SAMPLE_S)
            triton = service.triton
            rows.append(
                {
                    "t_s": round(time.monotonic() - started),
                    "answered": sum(c.pipeline.stats.answered for c in service.cameras.values()),
                    "service_mib": round(psutil.Process().memory_info().rss / 2**20),
                    "triton_mib": round(tree_rss_mib(triton.pid if triton else None)),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        service.request_stop()
        await runner
        return rows

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
