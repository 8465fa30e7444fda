"""Clips the capacity phases play, made with ffmpeg from yard_cam.ts.

``yard_cam.ts`` (8 s) shows a parked black car (plate ``O567AM76``) in every frame and a
silver car (``Y836XH76``) driving out in the first seconds, so no frame of it is without a
plate. :func:`still_segment` makes a *still* stretch: its last frame, with the parked car's
plate blurred (:data:`PARKED_PLATE_BLUR`; checked with the detector: nothing at a confidence
above 0.1 remains), held for N seconds; each frame decodes to the same picture, so the motion
gate sees no motion and the detector no plate. :func:`real_segment` is the clip itself,
re-encoded with the same settings, so that segments concatenate by stream copy (the concat
demuxer: timestamps continuous, every segment starting with a keyframe).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench.common import CLIP_FPS, count_frames, ffmpeg

#: The parked car's plate in yard_cam.ts' last frame (x, y, width, height, 1920x1080 pixels;
#: the detector's box is about [1523, 338, 1577, 367]), padded.
PARKED_PLATE_BLUR = (1500, 323, 100, 60)
#: The plates yard_cam.ts shows (assets/MANIFEST.md): any other event text is a misread.
TRUE_TEXTS = frozenset({"O567AM76", "Y836XH76"})
#: One encoder setting for every segment, so that they concatenate without re-encoding.
COPY = ["-c", "copy", "-f", "mpegts"]
ENCODE = [
    "-c:v",
    "libx264",
    "-preset",
    "ultrafast",
    "-crf",
    "17",
    "-g",
    str(int(CLIP_FPS)),  # a keyframe every second
    "-bf",
    "0",
    "-r",
    f"{CLIP_FPS:g}",
    "-f",
    "mpegts",
]


def still_segment(source: Path, seconds: float, out: Path) -> Path:
    """``seconds`` of the last frame of ``source``, its parked car's plate blurred."""
    last = count_frames(source) - 1
    frames = max(1, round(seconds * CLIP_FPS))
    x, y, w, h = PARKED_PLATE_BLUR
    graph = (
        f"[0:v]select=eq(n\\,{last}),split[a][b];[b]crop={w}:{h}:{x}:{y},boxblur=10:3[m];"
        f"[a][m]overlay={x}:{y},loop=loop={frames - 1}:size=1:start=0,"
        f"setpts=N/{CLIP_FPS:g}/TB,format=yuvj420p[v]"
    )
    ffmpeg(["-i", str(source), "-filter_complex", graph, "-map", "[v]", *ENCODE, str(out)])
    return out


def real_segment(source: Path, out: Path) -> Path:
    """``source`` re-encoded with :data:`ENCODE`."""
    ffmpeg(["-i", str(source), "-vf", "format=yuvj420p", "-an", *ENCODE, str(out)])
    return out


def concat(segments: Sequence[Path], out: Path) -> Path:
    """``segments`` back to back, stream-copied (concat demuxer)."""
    listing = out.with_suffix(".txt")
    listing.write_text("".join(f"file '{s.absolute()}'\n" for s in segments))
    ffmpeg(["-f", "concat", "-safe", "0", "-i", str(listing), *COPY, str(out)])
    return out


def gated_clip(source: Path, still_s: float, folder: Path) -> Path:
    """Phase M: ``still_s`` still, the clip, ``still_s`` still."""
    still = still_segment(source, still_s, folder / "m-still.ts")
    real = real_segment(source, folder / "m-real.ts")
    return concat([still, real, still], folder / "m-gated.ts")


def mix_clips(source: Path, still_s: int, cameras: int, folder: Path) -> list[Path]:
    """Phase C: per camera, the clip within ``still_s`` seconds of still, looped as one period.

    Camera ``i`` has ``offset_i`` seconds of still before the clip and ``still_s - offset_i``
    after it (offsets spread over the period, whole seconds), so the cameras' vehicles do not
    all come at once, as on a real site. Made of a 1 s still segment repeated (one keyframe
    each, the same picture) and the re-encoded clip.
    """
    second = still_segment(source, 1.0, folder / "c-still-1s.ts")
    real = real_segment(source, folder / "c-real.ts")
    clips: dict[int, Path] = {}
    out = []
    for i in range(cameras):
        offset = round(i * still_s / cameras)
        if offset not in clips:
            parts = [second] * offset + [real] + [second] * (still_s - offset)
            clips[offset] = concat(parts, folder / f"c-mix-{offset}.ts")
        out.append(clips[offset])
    return out
