"""Facts about test clips read with a plain PyAV decode (shared by the tests that need them)."""

from __future__ import annotations

from pathlib import Path

import av


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
