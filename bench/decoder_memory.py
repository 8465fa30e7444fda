"""What one camera's decoder keeps in memory, apart from the service.

    .venv/bin/python -m bench.decoder_memory [--cameras 8] [--frames 60] [--clip PATH]

Opens the clip (yard_cam.ts: 1080p H.264 High with B-frames, as most cameras send) ``N``
times as the service opens a camera (``streamer.ingest.decode.open_video``, no frame
threads), decodes ``--frames`` pictures from each and keeps none of them, with the
allocator settings the service uses; prints the process's RSS before and after and the
difference per decoder: the floor of what a camera costs the service, whatever it holds.
"""

from __future__ import annotations

import argparse
import gc
from pathlib import Path

import psutil

from converters import assets
from streamer.foundation.allocator import tune_allocator
from streamer.ingest.decode import open_video


def decoder_mib(clip: Path, cameras: int, frames: int) -> tuple[float, float]:
    """(RSS before, RSS after) in MiB with ``cameras`` open decoders of ``clip``."""
    tune_allocator()
    process = psutil.Process()
    before = process.memory_info().rss / 2**20
    opened = []
    for _ in range(cameras):
        container, stream = open_video(
            str(clip), live=False, rtsp_transport="tcp", open_timeout_s=10, read_timeout_s=10
        )
        pictures = container.decode(stream)
        for _, picture in zip(range(frames), pictures, strict=False):
            del picture
        opened.append((container, pictures))
    gc.collect()
    after = process.memory_info().rss / 2**20
    for container, _ in opened:
        container.close()
    return before, after


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cameras", type=int, default=8)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--clip", type=Path)
    args = parser.parse_args(argv)
    clip = args.clip or assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
    before, after = decoder_mib(clip, args.cameras, args.frames)
    print(
        f"{args.cameras} decoders of {clip.name}, {args.frames} pictures each: RSS "
        f"{before:.0f} -> {after:.0f} MiB, {(after - before) / args.cameras:.1f} MiB per decoder"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
