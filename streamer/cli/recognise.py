"""``python -m streamer recognise PATH``: print the plates of a video or image file.

::

    python -m streamer recognise PATH [--every N] [--triton-url HOST:PORT] [--timeout S]
                                      [--progress | --no-progress]

Every ``N``-th decoded frame of ``PATH`` (a video, or an image: one frame) is sent to the
``plate_recognition`` model; one JSON line per plate found is printed on stdout, in frame
order (Triton answers in any order; an answer waits for the frames before it)::

    {"frame": 42, "time_s": 2.8, "stream_time_s": 12172.333, "text": "O567AM76",
     "valid": true, "text_score": 0.981, "det_score": 0.874, "box": [812.4, 600.1, 955.0, 640.3]}

``frame`` is the index of the decoded frame; ``time_s`` its time from the start of the file
(0 for the first frame); ``stream_time_s`` the stream's own clock, its presentation time (an
MPEG-TS recording starts where the camera's clock stood: 12169.533 s for the sample clip);
``valid`` whether the text is a plate of the default formats
(streamer/domain/plate_formats.py).

Nothing else goes to stdout. On stderr: the log, and for a video a progress bar (tqdm) of the
frames done, out of the container's frame count, or its duration times its frame rate (an
estimate, corrected at the end), when it has either. The bar is on when stderr is a terminal;
``--progress`` / ``--no-progress`` force it either way.

It runs on the service's own parts: the file is decoded by a
:class:`~streamer.ingest.source.CameraSource` keeping every frame (PyAV, as a file camera of
the service reads it), and the frames go to Triton through
:class:`~streamer.inference.client.PlateRecognizer` with the ``triton`` section's defaults
(one gRPC stream, the adaptive window of one camera). With no ``--triton-url`` an embedded
CPU Triton is started on ``model_repository/`` and stopped at the end; it is imported only
then. ``--triton-url`` is the ``host:port`` of a Triton's gRPC endpoint, with the rule of
``triton.url`` in the config: no scheme (an ``http://`` address is usually Triton's HTTP port,
which does not speak gRPC; the parser refuses it rather than guess). Before the file is read,
the server and the model are asked once whether they are ready (within
``triton.connect_timeout_s``, or ``--timeout`` if shorter); ``--timeout`` then bounds the
rest of the run (and so each frame).

If the stream to Triton breaks mid-file, its frames wait for it to reopen (the client
reconnects by itself); when it stays down for ``triton.connect_timeout_s`` + 5 s, the run
ends with one line ``error: lost Triton at ...``. A failed frame's error is logged for the
first frame of each kind (``stream``, ``deadline``, ``model``); the rest are counted in the
last log line.

Exit codes: 0 every frame sent was answered; 1 Triton unreachable or not ready (one line), or
lost mid-file, the embedded Triton did not start or its repository is not built, a frame
failed, nothing could be decoded, or the timeout passed; 2 usage: a missing file,
``--every`` under 1, ``--timeout`` not above 0, ``--triton-url`` not ``host:port``; 130
interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import tritonclient.grpc.aio as aioclient
from pydantic import ValidationError
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm
from tritonclient.utils import InferenceServerException

from streamer.cli.arguments import positive_int, positive_seconds
from streamer.config import TritonConfig
from streamer.domain.frames import Frame, PlateReading
from streamer.domain.plate_formats import PlateFormats
from streamer.foundation.paths import DEFAULT_MODEL_REPOSITORY
from streamer.inference.client import InferenceError, PlateRecognizer
from streamer.inference.endpoints import check_ready
from streamer.inference.scheduler import scheduler_for
from streamer.ingest.decode import declared_rate
from streamer.ingest.frame_queue import FrameQueue
from streamer.ingest.sampling import EVERY_FRAME
from streamer.ingest.source import CameraSource
from streamer.ops.startup import StartupError, check_model_repository, triton_start_error

LOG = logging.getLogger("streamer")
#: Frames decoded ahead of inference: the decode thread waits when this many are queued.
DECODE_AHEAD = 8
#: How often the run looks whether the Triton stream is still open.
LOST_POLL_S = 0.2


def triton_address(text: str) -> str:
    """argparse ``type=``: ``host:port``, checked as ``triton.url`` of the config is."""
    try:
        TritonConfig(url=text)
    except ValidationError as exc:
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise argparse.ArgumentTypeError(message) from None
    return text


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``recognise`` to an ``add_subparsers()`` object (of ``python -m streamer``)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "recognise",
        help="print the plates of a video or image file, frame by frame (JSON lines)",
        description="Print one JSON line per plate found in every Nth frame of a file.",
    )
    parser.add_argument(
        "path", type=Path, metavar="PATH", help="a video (.ts, .mp4, .mkv, ...) or image file"
    )
    parser.add_argument(
        "--every",
        type=positive_int,
        default=3,
        metavar="N",
        help="send every Nth decoded frame to Triton (1: all of them; default %(default)s)",
    )
    parser.add_argument(
        "--triton-url",
        type=triton_address,
        metavar="HOST:PORT",
        help="the gRPC host:port of a running Triton, without a scheme (127.0.0.1:8001); "
        "default: start an embedded CPU Triton on model_repository/",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=600.0,
        metavar="S",
        help="give up after S seconds for the whole file (default %(default)g)",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        help="show a progress bar on stderr, or not (default: when stderr is a terminal)",
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """The command: check the arguments, start an embedded Triton unless given a URL."""
    if not args.path.is_file():
        print(f"error: {args.path} does not exist", file=sys.stderr)
        return 2
    progress = sys.stderr.isatty() if args.progress is None else bool(args.progress)
    if args.triton_url:
        return asyncio.run(
            recognise(args.triton_url, args.path, args.every, args.timeout, progress=progress)
        )
    repository = DEFAULT_MODEL_REPOSITORY
    try:
        check_model_repository(repository, "give --triton-url of a running Triton")
    except StartupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    # Here only: a run against a Triton of its own never imports the embedded one.
    from streamer.inference.embedded.errors import TritonStartError
    from streamer.inference.embedded.server import EmbeddedTriton

    LOG.info("starting the embedded Triton on %s", repository)
    try:
        with EmbeddedTriton(repository) as server:
            return asyncio.run(
                recognise(server.grpc_url, args.path, args.every, args.timeout, progress=progress)
            )
    except TritonStartError as exc:
        print(f"error: {triton_start_error(exc)}", file=sys.stderr)
        return 1


async def triton_problem(url: str, model: str, timeout_s: float) -> str | None:
    """Why the Triton at ``url`` cannot take frames for ``model`` (unreachable, not ready, no
    such model), in one line; None when it can. One question each, within ``timeout_s``."""
    client = aioclient.InferenceServerClient(url)
    try:
        await check_ready(client, model, timeout_s)
    except InferenceError as exc:
        return f"Triton at {url}: {exc}"
    except TimeoutError:
        return f"Triton at {url} did not answer within {timeout_s:g} s"
    except InferenceServerException as exc:
        why = (exc.message() or str(exc)).splitlines()[0]
        return f"cannot reach Triton at {url} ({why}): is it running, and is that its gRPC port?"
    finally:
        with contextlib.suppress(Exception):  # closing a channel that never connected
            await client.close()
    return None


def frame_total(path: Path) -> int | None:
    """How many frames the video ``path`` holds: its container's count, else its duration
    times its frame rate; 0 when it says neither; None when it is no video PyAV can open (the
    source then says why)."""
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                return None
            stream = container.streams.video[0]
            if stream.frames:
                return int(stream.frames)
            rate = declared_rate(stream)
            if stream.duration and stream.time_base and rate:
                return round(float(stream.duration * stream.time_base) * rate)
            if container.duration and rate:
                return round(container.duration / av.time_base * rate)
            return 0
    except (av.error.FFmpegError, OSError, ValueError):
        return None


async def recognise(
    url: str, path: Path, every: int, timeout_s: float, *, progress: bool = False
) -> int:
    """Print the plates of every ``every``-th frame of ``path`` read by Triton at ``url``,
    with a progress bar on stderr when ``progress`` and ``path`` is a video; the exit code."""
    triton = TritonConfig()
    problem = await triton_problem(url, triton.model, min(timeout_s, triton.connect_timeout_s))
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    total = await asyncio.to_thread(frame_total, path) if progress else None
    with contextlib.ExitStack() as stack:
        bar = None
        if total is not None and total != 1:  # a video (0: of unknown length)
            bar = stack.enter_context(
                tqdm(total=total or None, desc=path.name, unit="frame", file=sys.stderr)
            )
            stack.enter_context(logging_redirect_tqdm())  # log lines above the bar
        return await _recognise(url, path, every, timeout_s, triton, _Printer(PlateFormats(), bar))


async def _recognise(
    url: str, path: Path, every: int, timeout_s: float, triton: TritonConfig, printer: _Printer
) -> int:
    """The run on a Triton that answered: decode, send, print in frame order; the exit code."""
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
    pending: deque[tuple[Frame, asyncio.Task[tuple[PlateReading, ...]]]] = deque()
    # How long the stream may be down, at the start or mid-file, before the run gives up.
    wait_s = triton.connect_timeout_s + 5
    cut_short = False  # Triton lost, or --timeout passed: the file was not read to its end
    await recognizer.start()
    try:
        async with asyncio.timeout(timeout_s):
            try:
                await recognizer.wait_ready(wait_s)
            except TimeoutError:
                print(f"error: Triton at {url} is not ready", file=sys.stderr)
                return 1
            source.start()
            feed = asyncio.create_task(
                _feed(recognizer, queue, every, printer, pending), name="recognise-feed"
            )
            watch = asyncio.create_task(_lost(recognizer, wait_s), name="recognise-watch")
            try:
                await asyncio.wait({feed, watch}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (feed, watch):
                    task.cancel()
                await asyncio.gather(feed, watch, return_exceptions=True)
            if not feed.cancelled():
                feed.result()  # a bug in the feed surfaces here
                printer.finish(source.stats.decoded)
            else:
                why = watch.result()
                print(
                    f"error: lost Triton at {url} ({why}), not back within {wait_s:g} s",
                    file=sys.stderr,
                )
                cut_short = True
    except TimeoutError:
        LOG.error("not done within --timeout %g s", timeout_s)
        cut_short = True
    finally:
        for _, task in pending:
            task.cancel()
        await asyncio.gather(*(task for _, task in pending), return_exceptions=True)
        await source.astop()
        await recognizer.close()
    LOG.info("%d frames answered, %d failed%s", printer.answered, printer.failures, printer.why())
    if source.stats.decoded == 0:
        return 1  # the source logged why
    return 1 if printer.failures or cut_short else 0


async def _feed(
    recognizer: PlateRecognizer,
    queue: FrameQueue,
    every: int,
    printer: _Printer,
    pending: deque[tuple[Frame, asyncio.Task[tuple[PlateReading, ...]]]],
) -> None:
    """Send every ``every``-th frame of ``queue`` until it ends; print the answers in frame
    order (``pending``: the frames sent and not printed yet, oldest first)."""
    while (frame := await queue.get()) is not None:
        if printer.origin_s is None:
            printer.origin_s = frame.pts_s  # the first frame: time_s 0
        if frame.index % every:
            continue
        permit = await recognizer.acquire(frame.camera)  # bounds the frames in flight
        task = asyncio.create_task(
            recognizer.recognise(frame, permit), name=f"recognise-{frame.index}"
        )
        pending.append((frame, task))
        while pending and pending[0][1].done():  # in frame order
            printer.report(*pending.popleft())
    while pending:
        await asyncio.wait([pending[0][1]])
        printer.report(*pending.popleft())


async def _lost(recognizer: PlateRecognizer, grace_s: float) -> str:
    """Returns, with the reason, once the stream has been down for ``grace_s`` in a row (its
    frames would otherwise wait up to ``--timeout`` for a Triton that is gone)."""
    down_since: float | None = None
    while True:
        now = time.monotonic()
        if recognizer.ready:
            down_since = None
        elif down_since is None:
            down_since = now
        elif now - down_since >= grace_s:
            return recognizer.problem or "stream closed"
        await asyncio.sleep(LOST_POLL_S)


class _Printer:
    """Prints the plates of each answered frame, moves the progress bar (if any) on, and
    counts the frames answered and failed."""

    def __init__(self, formats: PlateFormats, bar: tqdm | None) -> None:
        self.formats = formats
        self.bar = bar
        #: The first frame's stream time: ``time_s`` is measured from it.
        self.origin_s: float | None = None
        self.answered = 0
        self.failures = 0
        #: Failed frames by error kind: the first of each kind is logged, the rest counted (a
        #: Triton that dies mid-file would otherwise log one line per frame in flight).
        self.failed_by_kind: Counter[str] = Counter()

    def report(self, frame: Frame, task: asyncio.Task[tuple[PlateReading, ...]]) -> None:
        """Print the plates of ``frame`` from its finished ``task``, or log its failure."""
        self.answered += 1
        try:
            plates = task.result()
        except InferenceError as exc:
            self.failures += 1
            self.failed_by_kind[exc.kind] += 1
            if self.failed_by_kind[exc.kind] == 1:
                LOG.error(
                    "frame %s: %s (later %s errors are counted, not logged)",
                    frame.index,
                    exc,
                    exc.kind,
                )
            plates = ()
        lines = list(plate_lines(frame, plates, self.formats, self.origin_s or 0.0))
        if self.bar is None:
            for line in lines:
                print(line, flush=True)
            return
        if lines:
            with tqdm.external_write_mode(file=sys.stdout):  # the bar steps aside on a terminal
                for line in lines:
                    print(line, flush=True)
        self.bar.update(frame.index + 1 - self.bar.n)  # frames up to this one are done

    def why(self) -> str:
        """The failures by kind, ``" (stream: 12, deadline: 1)"``; empty when none failed."""
        kinds = ", ".join(f"{kind}: {n}" for kind, n in self.failed_by_kind.most_common())
        return f" ({kinds})" if kinds else ""

    def finish(self, decoded: int) -> None:
        """The file has ended after ``decoded`` frames: the bar shows them all."""
        if self.bar is not None:
            self.bar.total = decoded
            self.bar.update(decoded - self.bar.n)


def plate_lines(
    frame: Frame, plates: tuple[PlateReading, ...], formats: PlateFormats, origin_s: float
) -> Iterator[str]:
    """One JSON line per plate of ``frame``, whose file began at stream time ``origin_s`` (the
    format in this module's docstring)."""
    for plate in plates:
        yield json.dumps(
            {
                "frame": frame.index,
                "time_s": round(frame.pts_s - origin_s, 3),
                "stream_time_s": round(frame.pts_s, 3),
                "text": plate.text,
                "valid": formats.is_valid(plate.text),
                "text_score": round(plate.text_score, 3),
                "det_score": round(plate.det_score, 3),
                "box": [round(v, 1) for v in plate.box],
            }
        )
