"""The shared yard clip, variants of it made with ffmpeg, and facts about clips read with a
plain PyAV decode (shared by the tests that need them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import av

from converters import assets

#: The shared footage the tests build their variants from (../shared/assets, verified).
YARD_CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
#: Its frame rate.
YARD_FPS = 15
#: How variants are encoded: libx264 near-lossless, a keyframe every 2 s.
_X264 = ["-c:v", "libx264", "-preset", "ultrafast", "-crf", "18", "-g", "30", "-pix_fmt", "yuv420p"]


def encode_yard(out: Path, graph: str) -> Path:
    """``YARD_CLIP`` through the ffmpeg filter ``graph`` (its output pad ``[out]``), encoded
    to ``out`` as MPEG-TS at the clip's frame rate."""
    command = ["ffmpeg", "-v", "error", "-y", "-i", str(YARD_CLIP), "-filter_complex", graph]
    command += ["-map", "[out]", "-r", str(YARD_FPS), *_X264, "-f", "mpegts", str(out)]
    subprocess.run(command, check=True, timeout=120)
    return out


def sample_times(path: Path, fps: float) -> list[float]:
    """The stream times a sampler at ``fps`` keeps (every frame decoded, slots from the first)."""
    kept: list[float] = []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            assert frame.pts is not None and frame.time_base is not None
            t = float(frame.pts * frame.time_base)
            if not kept or t >= kept[0] + len(kept) / fps - 1e-3:
                kept.append(t)
    return kept
