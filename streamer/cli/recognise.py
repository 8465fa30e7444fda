"""``python -m streamer recognise PATH``: print the plates of a video or image file.

::

    python -m streamer recognise PATH [--every N] [--triton-url HOST:PORT] [--timeout S]

Every ``N``-th decoded frame of ``PATH`` (a video, or an image: one frame) is sent to the
``plate_recognition`` model; one JSON line per plate found is printed, in frame order::

    {"frame": 42, "time_s": 2.8, "text": "O567AM76", "valid": true, "text_score": 0.981,
     "det_score": 0.874, "box": [812.4, 600.1, 955.0, 640.3]}

``frame`` is the index of the decoded frame, ``time_s`` its stream time, ``valid`` whether
the text is a plate of the default formats (streamer/tracking/plate_formats.py).

It runs on the service's own parts: the file is decoded by a
:class:`~streamer.ingest.source.CameraSource` keeping every frame (PyAV, as a file camera of
the service reads it), and the frames go to Triton through
:class:`~streamer.inference.client.PlateRecognizer` with the ``triton`` section's defaults
(one gRPC stream, the adaptive window of one camera). With no ``--triton-url`` an embedded
CPU Triton is started on ``model_repository/`` and stopped at the end; it is imported only
then. ``--timeout`` bounds the whole run (and so each frame).

Exit codes: 0 every frame sent was answered; 1 a frame failed, nothing could be decoded,
Triton never answered, or the timeout passed; 2 a missing file, a repository not built, or
a bad ``--every``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streamer.config import TritonConfig
from streamer.domain.frames import Frame, PlateReading
from streamer.inference.client import InferenceError, PlateRecognizer
from streamer.inference.scheduler import scheduler_for
from streamer.ingest.frame_queue import FrameQueue
from streamer.ingest.sampling import EVERY_FRAME
from streamer.ingest.source import CameraSource
from streamer.ops.paths import DEFAULT_MODEL_REPOSITORY
from streamer.tracking.plate_formats import PlateFormats

LOG = logging.getLogger("streamer")
#: Frames decoded ahead of inference: the decode thread waits when this many are queued.
DECODE_AHEAD = 8


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``recognise`` to an ``add_subparsers()`` object (of ``python -m streamer``)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "recognise", help="print the plates of a video or image file"
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("--every", type=int, default=3, help="send every Nth frame")
    parser.add_argument("--triton-url", help="host:port of a running Triton (gRPC)")
    parser.add_argument("--timeout", type=float, default=600.0, help="stream deadline, s")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """The command: check the arguments, start an embedded Triton unless given a URL."""
    if not args.path.is_file():
        print(f"error: {args.path} does not exist", file=sys.stderr)
        return 2
    if args.every < 1:
        print(f"error: --every must be 1 or more, got {args.every}", file=sys.stderr)
        return 2
    if args.triton_url:
        return asyncio.run(recognise(args.triton_url, args.path, args.every, args.timeout))
    repository = DEFAULT_MODEL_REPOSITORY
    if not (repository / "build_info.json").is_file():
        print("error: model_repository/ is not built: run `make models`", file=sys.stderr)
        return 2
    # Here only: a run against a Triton of its own never imports the embedded one.
    from streamer.inference.embedded.server import EmbeddedTriton

    LOG.info("starting the embedded Triton on %s", repository)
    with EmbeddedTriton(repository) as server:
        return asyncio.run(recognise(server.grpc_url, args.path, args.every, args.timeout))


async def recognise(url: str, path: Path, every: int, timeout_s: float) -> int:
    """Print the plates of every ``every``-th frame of ``path`` read by Triton at ``url``;
    the exit code."""
    triton = TritonConfig()
    recognizer = PlateRecognizer(
        url,
        triton.model,
        scheduler=scheduler_for(triton),
        request_timeout_s=timeout_s,
        connect_timeout_s=triton.connect_timeout_s,
    )
    queue = FrameQueue(DECODE_AHEAD, "wait")
    source = CameraSource(
        path.name,
        str(path),
        sample_fps=EVERY_FRAME,
        realtime=False,
        loop_file=False,
        queue=queue,
    )
    printer = _Printer(PlateFormats())
    pending: deque[tuple[Frame, asyncio.Task[tuple[PlateReading, ...]]]] = deque()
    await recognizer.start()
    try:
        async with asyncio.timeout(timeout_s):
            try:
                await recognizer.wait_ready(triton.connect_timeout_s + 5)
            except TimeoutError:
                print(f"error: Triton at {url} is not ready", file=sys.stderr)
                return 1
            source.start()
            while (frame := await queue.get()) is not None:
                if frame.index % every:
                    continue
                permit = await recognizer.acquire(frame.camera)  # bounds the frames in flight
                task = asyncio.create_task(
                    recognizer.recognise(frame, permit), name=f"recognise-{frame.index}"
                )
                pending.append((frame, task))
                while pending and pending[0][1].done():
                    printer.report(*pending.popleft())
            while pending:
                await asyncio.wait([pending[0][1]])
                printer.report(*pending.popleft())
    except TimeoutError:
        LOG.error("not done within --timeout %g s", timeout_s)
        printer.failures += 1
    finally:
        for _, task in pending:
            task.cancel()
        await asyncio.gather(*(task for _, task in pending), return_exceptions=True)
        await source.astop()
        await recognizer.close()
    LOG.info("%d frames answered, %d failed", printer.answered, printer.failures)
    if source.stats.decoded == 0:
        return 1  # the source logged why
    return 1 if printer.failures else 0


class _Printer:
    """Prints the plates of each answered frame; counts the frames and the failures."""

    def __init__(self, formats: PlateFormats) -> None:
        self.formats = formats
        self.answered = 0
        self.failures = 0

    def report(self, frame: Frame, task: asyncio.Task[tuple[PlateReading, ...]]) -> None:
        """Print the plates of ``frame`` from its finished ``task``, or log its failure."""
        self.answered += 1
        try:
            plates = task.result()
        except InferenceError as exc:
            self.failures += 1
            LOG.error("frame %s: %s", frame.index, exc)
            return
        for line in plate_lines(frame, plates, self.formats):
            print(line, flush=True)


def plate_lines(
    frame: Frame, plates: tuple[PlateReading, ...], formats: PlateFormats
) -> Iterator[str]:
    """One JSON line per plate of ``frame`` (the format in this module's docstring)."""
    for plate in plates:
        yield json.dumps(
            {
                "frame": frame.index,
                "time_s": round(frame.pts_s, 3),
                "text": plate.text,
                "valid": formats.is_valid(plate.text),
                "text_score": round(plate.text_score, 3),
                "det_score": round(plate.det_score, 3),
                "box": [round(v, 1) for v in plate.box],
            }
        )
