"""Clips the capacity phases play, made with ffmpeg from yard_cam.ts.

``yard_cam.ts`` (8 s) shows a parked black car (plate ``O567AM76``) in every frame and a
silver car (``Y836XH76``) driving out in the first seconds, so no frame of it is without a
plate. Every clip here is encoded as a camera's encoder would send it: libx264 at about the
clip's own bit rate (:data:`CAMERA_KBPS`, capped by a VBV buffer), so a noisy still scene
costs the bits a camera would spend on it, not more.

* *Still* (:func:`still_segment`): real stillness, the yard with no vehicle moving and no
  readable plate. The clip's last frame, the parked car's plate blurred
  (:data:`PARKED_PLATE_BLUR`; checked with the detector: nothing at a confidence above 0.1
  remains), held for N seconds with fresh sensor noise added to every frame
  (:data:`STILL_NOISE`, FFmpeg's temporal ``noise`` filter) before the encoder, so no two
  still frames decode to the same picture: the motion gate sees what a camera's stillness
  looks like (noise, encoder keyframe pulses), not one frame looped. The parked car stays
  in view (it is in every frame of the clip); only its plate is unreadable.
* Phase M (:func:`gated_clip`): still, the clip, still, in one encode.
* Phase C (:func:`mix_clips`): per camera, the clip within a still period, its position
  staggered by camera; segments encoded once with a keyframe every second and no B-frames
  (:data:`ENCODE`, as many IP cameras send), cut and joined by stream copy.
* Phase O (:func:`ladder_clips`): camera ``i`` of ``N`` plays the clip rotated by
  ``i / N`` of its length (:func:`offsets`), so that no two cameras show the same frame at
  the same moment; encoded like the source (one GOP, B-frames), so that a camera decodes
  the same share of its frames as from yard_cam.ts itself.
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
#: Target bit rate of every clip (kb/s): about yard_cam.ts' own (1.7 Mbit/s with its
#: transport-stream overhead).
CAMERA_KBPS = 1600
#: Strength of the sensor noise in still frames (FFmpeg ``noise=alls``, Gaussian, a new
#: pattern every frame). After the encoder, consecutive still frames differ by 0.1-0.5 grey
#: levels on average, as the quiet end of yard_cam.ts does (0.2-0.5), and keyframes pulse by a
#: few levels: under the gate's default threshold of 20 after its blur.
STILL_NOISE = 12
STILL_NOISE_NOTE = f"FFmpeg noise=alls={STILL_NOISE}:allf=t before the encoder"
COPY = ["-c", "copy", "-f", "mpegts"]


def encode(gop: int, b_frames: int) -> list[str]:
    """libx264 as a camera: :data:`CAMERA_KBPS`, a keyframe every ``gop`` frames exactly."""
    return [
        *("-c:v", "libx264", "-preset", "veryfast"),
        *("-b:v", f"{CAMERA_KBPS}k", "-maxrate", f"{CAMERA_KBPS * 3 // 2}k"),
        *("-bufsize", f"{CAMERA_KBPS * 2}k"),
        *("-g", str(gop), "-keyint_min", str(gop), "-sc_threshold", "0"),
        *("-bf", str(b_frames), "-r", f"{CLIP_FPS:g}", "-an", "-f", "mpegts"),
    ]


#: Segments that concatenate by stream copy: a keyframe every second, no B-frames.
ENCODE = encode(int(CLIP_FPS), 0)


def _still(source: Path, seconds: float, label: str, seeds: Sequence[int] = (1,)) -> str:
    """A filter graph: the last frame of input 0, plate blurred, ``seconds`` long, with sensor
    noise; one output ``[{label}{i}]`` per seed (each its own noise)."""
    last = count_frames(source) - 1
    frames = max(1, round(seconds * CLIP_FPS))
    x, y, w, h = PARKED_PLATE_BLUR
    graph = (
        f"[0:v]select=eq(n\\,{last}),split[a][b];[b]crop={w}:{h}:{x}:{y},boxblur=10:3[m];"
        f"[a][m]overlay={x}:{y},loop=loop={frames - 1}:size=1:start=0,"
        f"setpts=N/{CLIP_FPS:g}/TB,split={len(seeds)}"
        + "".join(f"[{label}h{i}]" for i in range(len(seeds)))
    )
    for i, seed in enumerate(seeds):
        graph += (
            f";[{label}h{i}]noise=alls={STILL_NOISE}:allf=t:all_seed={seed},"
            f"format=yuvj420p[{label}{i}]"
        )
    return graph


def still_segment(source: Path, seconds: float, out: Path, seed: int = 1) -> Path:
    """``seconds`` of real stillness (see the module's doc), encoded with :data:`ENCODE`."""
    graph = _still(source, seconds, "s", (seed,))
    ffmpeg(["-i", str(source), "-filter_complex", graph, "-map", "[s0]", *ENCODE, str(out)])
    return out


def real_segment(source: Path, out: Path) -> Path:
    """``source`` re-encoded with :data:`ENCODE`."""
    ffmpeg(["-i", str(source), "-vf", "format=yuvj420p", *ENCODE, str(out)])
    return out


def gated_clip(source: Path, still_s: float, folder: Path) -> Path:
    """Phase M: ``still_s`` still, the clip, ``still_s`` still (each still its own noise)."""
    graph = (
        _still(source, still_s, "s", (1, 2))
        + ";[0:v]setpts=PTS-STARTPTS,format=yuvj420p[r];[s0][r][s1]concat=n=3:v=1:a=0[v]"
    )
    out = folder / "m-gated.ts"
    ffmpeg(["-i", str(source), "-filter_complex", graph, "-map", "[v]", *ENCODE, str(out)])
    return out


def mix_clips(source: Path, still_s: int, cameras: int, folder: Path) -> list[Path]:
    """Phase C: per camera, the clip within ``still_s`` seconds of still, looped as one period.

    Camera ``i`` has ``offset_i`` seconds of still before the clip and ``still_s - offset_i``
    after it (offsets spread over the period, whole seconds), so the cameras' vehicles do not
    all come at once, as on a real site. Made of one ``still_s`` still segment (a keyframe
    every second, cut there by the concat demuxer's in/out points) and the re-encoded clip.
    """
    still = still_segment(source, float(still_s), folder / "c-still.ts")
    real = real_segment(source, folder / "c-real.ts")
    start = _start_s(still)  # in and out points are the file's own timestamps
    clips: dict[int, Path] = {}
    out = []
    for i in range(cameras):
        offset = round(i * still_s / cameras)
        if offset not in clips:
            listing = folder / f"c-mix-{offset}.txt"
            cut = f"{start + offset:.6f}"
            parts = [f"file '{still.absolute()}'\noutpoint {cut}\n"] * (offset > 0)
            parts.append(f"file '{real.absolute()}'\n")
            parts += [f"file '{still.absolute()}'\ninpoint {cut}\n"] * (offset < still_s)
            listing.write_text("".join(parts))
            clip = folder / f"c-mix-{offset}.ts"
            ffmpeg(["-f", "concat", "-safe", "0", "-i", str(listing), *COPY, str(clip)])
            clips[offset] = clip
        out.append(clips[offset])
    return out


def _start_s(path: Path) -> float:
    """The first timestamp of ``path`` in seconds (MPEG-TS starts at 1.4 s, not 0)."""
    import av

    with av.open(str(path)) as container:
        return (container.start_time or 0) / 1e6


def offsets(frames: int, cameras: int) -> list[int]:
    """Where in a clip of ``frames`` frames each of ``cameras`` cameras starts: evenly apart,
    all different while there are no more cameras than frames."""
    return [i * frames // cameras for i in range(cameras)]


def rotated_clip(source: Path, offset: int, out: Path) -> Path:
    """``source`` from frame ``offset`` to its end, then its first ``offset`` frames, encoded
    like the source (one GOP for the whole clip, B-frames), so that it loops the same way."""
    frames = count_frames(source)
    tail = f"setpts=N/{CLIP_FPS:g}/TB,format=yuvj420p"
    if offset % frames == 0:
        graph = f"[0:v]{tail}[v]"
    else:
        graph = (
            f"[0:v]split[a][b];[a]trim=start_frame={offset},setpts=PTS-STARTPTS[x];"
            f"[b]trim=end_frame={offset},setpts=PTS-STARTPTS[y];"
            f"[x][y]concat=n=2:v=1:a=0,{tail}[v]"
        )
    args = ["-i", str(source), "-filter_complex", graph, "-map", "[v]", *encode(frames, 3)]
    ffmpeg([*args, str(out)])
    return out


def ladder_clips(source: Path, ladder: Sequence[int], folder: Path) -> dict[int, list[Path]]:
    """Phase O: for each step of ``ladder``, one clip per camera at :func:`offsets` (each
    offset encoded once, whichever steps share it); ``{0: [the reference clip]}`` too."""
    folder.mkdir(parents=True, exist_ok=True)
    frames = count_frames(source)
    made: dict[int, Path] = {}

    def clip(offset: int) -> Path:
        if offset not in made:
            path = folder / f"o-offset-{offset}.ts"  # made by an earlier phase, if it exists
            made[offset] = path if path.exists() else rotated_clip(source, offset, path)
        return made[offset]

    steps = {n: [clip(o) for o in offsets(frames, n)] for n in ladder}
    return {0: [clip(0)], **steps}
