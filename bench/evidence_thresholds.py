"""What the evidence measure (streamer/tracking/evidence.py) reads on the yard clip: the figures
docs/events.md ("Evidence") quotes for choosing its thresholds.

    .venv/bin/python -m bench.evidence_thresholds

No Triton: the plates' boxes are the ones the recogniser gives on this clip (the parked
black car's, and the silver car's interpolated between its first and last read, as in
tests/streamer/tracking/test_passes.py). Prints, in grey levels (0-255) and fractions of the
plate's height:

- the parked car's crop, in a fixed box, against the clip's first frame over time;
- a held frame (frame 9, re-encoded by ffmpeg like tests/streamer/tracking/test_still_vehicle.py)
  against its first copy;
- the silver car, driving off: box shift and crop change 1, 3 and 5 frames on.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np

from bench.common import ffmpeg, source_clip
from streamer.tracking.evidence import Sample, box_shift, image_change

BLACK = (1523.0, 336.0, 1578.0, 369.0)
SILVER_FIRST, SILVER_LAST = (81.0, 364.0, 135.0, 401.0), (71.0, 350.0, 122.0, 381.0)


def _frames(path: Path) -> Iterator[np.ndarray]:
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            yield frame.to_ndarray(format="bgr24")


def _silver(i: int) -> tuple[float, float, float, float]:
    a = (i - 3) / 21
    x1, y1, x2, y2 = (f + (last - f) * a for f, last in zip(SILVER_FIRST, SILVER_LAST, strict=True))
    return x1, y1, x2, y2


def main() -> None:
    clip = source_clip()
    frames = list(_frames(clip))
    first = Sample.of(frames[0], BLACK)
    drift = [image_change(first, image) for image in frames]
    print("parked car, crop vs frame 0 (fixed box), per second of the clip:")
    print("  " + "  ".join(f"{np.mean(drift[s : s + 15]):.2f}" for s in range(0, len(drift), 15)))
    steps = [image_change(Sample.of(a, BLACK), b) for a, b in itertools.pairwise(frames)]
    print(f"  frame to frame: median {np.median(steps):.2f}, max {max(steps):.2f}")

    with tempfile.TemporaryDirectory() as tmp:
        held = Path(tmp) / "held.ts"
        graph = "[0:v]loop=loop=90:size=1:start=9,setpts=N/15/TB[out]"
        ffmpeg(["-i", str(clip), "-filter_complex", graph, "-map", "[out]", "-r", "15",
                "-c:v", "libx264", "-preset", "ultrafast", "-crf", "18", "-g", "30",
                "-pix_fmt", "yuv420p", "-f", "mpegts", str(held)])  # fmt: skip
        copies = list(_frames(held))[10:95]
    anchor = Sample.of(copies[0], BLACK)
    changes = [image_change(anchor, image) for image in copies[1:]]
    print(f"held frame 9 vs its first copy: max {max(changes):.2f}, mean {np.mean(changes):.2f}")

    print("silver car, from frame k: box shift / crop change after 1, 3, 5 frames")
    for k in (3, 8, 13, 18):
        anchor = Sample.of(frames[k], _silver(k))
        cells = [
            f"+{d}: {box_shift(_silver(k), _silver(k + d)):.2f} / "
            f"{image_change(anchor, frames[k + d]):.1f}"
            for d in (1, 3, 5)
        ]
        print(f"  k={k}: " + "   ".join(cells))


if __name__ == "__main__":
    main()
