"""Inference fps of the running service with 0, 1 and 4 WebRTC viewers of its camera.

    .venv/bin/python bench/viewers.py [--seconds 30] [--viewers 0 1 4] [--sample-fps 5]
                                      [--triton-url HOST:PORT] [--json PATH]

The real service runs in this process on the sample clip, looped in real time as one
camera (like a live camera: frames inference cannot keep up with are dropped), with an
embedded CPU Triton unless ``--triton-url`` is given, and its web server on a free
port. The viewers are aiortc peer connections in a separate process (as a browser would
be), each decoding every frame it receives. Per phase, after the viewers have their
first frame: frames answered by Triton per second (inference fps), frames dropped
because inference was behind, frames each viewer decoded per second, and the CPU the
service process used (% of one core). Figures are what this machine measured at that
moment: nothing here is asserted.

Loopback only: aioice leaves 127.0.0.1 out of its host candidates, so both processes
replace ``aioice.ice.get_host_addresses`` (a benchmark-only patch).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aioice.ice
import psutil

from converters import assets
from streamer.app import Service
from streamer.config import load_config
from streamer.web import WebServer

LOG = logging.getLogger("bench.viewers")


def _loopback_ice() -> None:
    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]


# --------------------------------------------------------------------------- viewer process


async def _viewers(url: str, count: int, seconds: float) -> dict[str, Any]:
    import aiohttp
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
    from aiortc.mediastreams import MediaStreamError

    pcs: list[RTCPeerConnection] = []
    counts = [0] * count
    first = [asyncio.Event() for _ in range(count)]
    counting = asyncio.Event()

    async def watch(i: int, session: aiohttp.ClientSession) -> None:
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pcs.append(pc)
        pc.addTransceiver("video", direction="recvonly")
        tracks: asyncio.Queue[Any] = asyncio.Queue()
        pc.on("track", tracks.put_nowait)
        await pc.setLocalDescription(await pc.createOffer())
        offer = {"sdp": pc.localDescription.sdp, "type": pc.localDescription.type}
        async with session.post(url, json=offer) as response:
            response.raise_for_status()
            answer = await response.json()
        await pc.setRemoteDescription(RTCSessionDescription(**answer))
        track = await tracks.get()
        try:
            while True:
                await track.recv()
                first[i].set()
                if counting.is_set():
                    counts[i] += 1
        except MediaStreamError:
            pass

    async with aiohttp.ClientSession() as session:
        tasks = [asyncio.create_task(watch(i, session)) for i in range(count)]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in first)), 60)
        counting.set()
        print("ready", flush=True)
        started = time.monotonic()
        await asyncio.sleep(seconds)
        elapsed = time.monotonic() - started
        counting.clear()
        for pc in pcs:
            await pc.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {"viewer_fps": [round(c / elapsed, 2) for c in counts]}


def viewer_process(url: str, count: int, seconds: float) -> None:
    _loopback_ice()
    result = asyncio.run(_viewers(url, count, seconds))
    print(json.dumps(result), flush=True)


# --------------------------------------------------------------------------- service process


async def _poll(check: Any, timeout_s: float, what: str) -> None:
    """Until ``check()`` holds; RuntimeError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def _web_of(service: Service, runner: asyncio.Task[int]) -> tuple[WebServer, bool]:
    """The service's web server (its own once it starts one, else one started here)."""
    await _poll(lambda: service.cameras or runner.done(), 600, "the service to start")
    if runner.done():
        raise RuntimeError(f"the service stopped: {runner.exception()!r}")
    web = getattr(service, "web", None)
    if web is not None:
        await _poll(lambda: web.port is not None, 60, "the web server")
        return web, False
    web = WebServer(service, service.settings.web)
    await web.start()
    return web, True


def _answered(service: Service) -> tuple[int, int]:
    cameras = service.cameras.values()
    return (
        sum(c.pipeline.stats.answered for c in cameras),
        sum(c.queue.dropped for c in cameras),
    )


async def _phase(service: Service, web: WebServer, viewers: int, seconds: float) -> dict[str, Any]:
    process = psutil.Process()
    client = None
    if viewers:
        url = f"http://127.0.0.1:{web.port}/api/cameras/yard/webrtc"
        client = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--client",
            url,
            str(viewers),
            str(seconds),
            stdout=subprocess.PIPE,
        )
        assert client.stdout is not None
        line = await asyncio.wait_for(client.stdout.readline(), 90)
        if line.strip() != b"ready":
            raise RuntimeError(f"the viewer process did not start: {line!r}")
    cpu0, t0 = process.cpu_times(), time.monotonic()
    answered0, dropped0 = _answered(service)
    await asyncio.sleep(seconds)
    answered1, dropped1 = _answered(service)
    cpu1, t1 = process.cpu_times(), time.monotonic()
    row: dict[str, Any] = {
        "viewers": viewers,
        "seconds": round(t1 - t0, 1),
        "inference_fps": round((answered1 - answered0) / (t1 - t0), 2),
        "dropped_per_s": round((dropped1 - dropped0) / (t1 - t0), 2),
        "service_cpu_pct": round(
            100 * ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / (t1 - t0), 1
        ),
        "viewer_fps": [],
    }
    if client is not None:
        assert client.stdout is not None
        output = await asyncio.wait_for(client.stdout.read(), 60)
        await client.wait()
        row["viewer_fps"] = json.loads(output.decode().strip().splitlines()[-1])["viewer_fps"]
    # Every viewer gone before the next phase.
    await _poll(lambda: not web.peer_connections, 30, "the viewers to leave")
    row["peer_connections_after"] = len(web.peer_connections)
    return row


async def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    _loopback_ice()
    clip = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "bench.yaml"
        triton = f"triton: {{url: '{args.triton_url}'}}\n" if args.triton_url else ""
        config.write_text(
            f"cameras:\n  - {{name: yard, url: '{clip}', sample_fps: {args.sample_fps},"
            " realtime: true}\n"
            f"{triton}"
            "events: {stdout: false}\n"
            "metrics: {port: 0}\n"
            "web: {port: 0}\n"
            "log: {level: WARNING}\n"
        )
        service = Service(load_config(config))
    runner = asyncio.create_task(service.run())
    own_web: WebServer | None = None
    rows = []
    try:
        web, started_here = await _web_of(service, runner)
        own_web = web if started_here else None
        print(f"warming up {args.warmup:g} s ...", file=sys.stderr)
        await _poll(lambda: _answered(service)[0] > 0, 300, "a first inference")
        await asyncio.sleep(args.warmup)
        for viewers in args.viewers:
            print(f"{viewers} viewer(s), {args.seconds:g} s ...", file=sys.stderr)
            rows.append(await _phase(service, web, viewers, args.seconds))
            print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        if own_web is not None:
            await own_web.stop()
        service.request_stop()
        await runner
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| viewers | inference fps | dropped/s (behind) | service CPU % | fps per viewer |",
        "| ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        per_viewer = ", ".join(f"{v:g}" for v in row["viewer_fps"]) or "-"
        lines.append(
            f"| {row['viewers']} | {row['inference_fps']:.2f} | {row['dropped_per_s']:.2f} "
            f"| {row['service_cpu_pct']:.0f} | {per_viewer} |"
        )
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        viewer_process(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each phase")
    parser.add_argument("--viewers", type=int, nargs="+", default=[0, 1, 4])
    parser.add_argument("--sample-fps", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before phase one")
    parser.add_argument("--triton-url", default=None, help="host:port; default: embedded")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rows = asyncio.run(bench(args))
    print(
        f"{platform.node()}: {os.cpu_count()} CPUs, {platform.python_version()}; "
        f"sample_fps {args.sample_fps:g}, realtime clip, "
        f"{'Triton ' + args.triton_url if args.triton_url else 'embedded CPU Triton'}"
    )
    print(_table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
