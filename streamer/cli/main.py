"""Command line of the service.

``python -m streamer run --config FILE [--once]``: the service. Runs until
SIGINT/SIGTERM; with ``--once`` file cameras play once and it exits when every
camera has ended and every event is written, after a line per camera (exit 1 when
a camera never delivered a frame or Triton answered none). A bad config or
usage exits with code 2; a start-up failure a user can fix (streamer/ops/startup.py)
with one line and code 1.

``python -m streamer replay --config FILE --truth TRUTH.yaml``: play the config's clips
once, as fast as possible, and score the events against the truth (streamer/cli/replay.py).

``python -m streamer recognise FILE``: read a video or image file, send sampled
frames to the ``plate_recognition`` model and print one JSON line per plate
found. With no ``--triton-url`` an embedded CPU Triton is started on
``model_repository/`` and stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import threading
import typing
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import InferInput, InferRequestedOutput, InferResult

from streamer.cli import deadletters
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.ops.logs import setup_logging
from streamer.ops.paths import DEFAULT_MODEL_REPOSITORY
from streamer.tracking.plate_formats import PlateFormats

LOG = logging.getLogger("streamer")
MODEL = "plate_recognition"
OUTPUTS = ("boxes", "det_scores", "texts", "text_scores")
#: Frames decoded ahead of inference: the decoder thread waits when this is full.
DECODE_AHEAD = 8


def _frames(path: Path, every: int) -> Iterator[tuple[int, float, np.ndarray]]:
    """(index, seconds, BGR frame) for every ``every``-th frame of a video, or an image."""
    image = cv2.imread(str(path)) if path.suffix.lower() in {".jpg", ".jpeg", ".png"} else None
    if image is not None:
        yield 0, 0.0, image
        return
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        for index, frame in enumerate(container.decode(stream)):
            if index % every == 0:
                seconds = float(frame.pts * stream.time_base) if frame.pts is not None else 0.0
                yield index, seconds, frame.to_ndarray(format="bgr24")


async def _decoded(path: Path, every: int) -> AsyncIterator[tuple[int, float, np.ndarray]]:
    """Decode in a worker thread; hand frames over through a bounded queue (waits when full)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[int, float, np.ndarray] | BaseException | None] = asyncio.Queue(
        DECODE_AHEAD
    )
    stop = threading.Event()

    def work() -> None:
        try:
            for item in _frames(path, every):
                if stop.is_set():
                    return
                asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()
            asyncio.run_coroutine_threadsafe(queue.put(None), loop).result()
        except BaseException as exc:  # handed to the consumer, raised there
            if not stop.is_set():
                asyncio.run_coroutine_threadsafe(queue.put(exc), loop).result()

    thread = threading.Thread(target=work, name=f"decode-{path.name}", daemon=True)
    thread.start()
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while not queue.empty():  # unblock a producer waiting on a full queue
            queue.get_nowait()
        await asyncio.to_thread(thread.join, 10)


async def _recognise(url: str, path: Path, every: int, timeout_s: float) -> int:
    formats = PlateFormats()
    client = aioclient.InferenceServerClient(url)
    sent: dict[str, tuple[int, float]] = {}
    done = asyncio.Event()

    async def requests() -> AsyncIterator[dict[str, Any]]:
        async for index, seconds, frame in _decoded(path, every):
            tensor = InferInput("image", list(frame.shape), "UINT8")
            tensor.set_data_from_numpy(frame)
            rid = f"frame-{index}"
            sent[rid] = (index, seconds)
            yield {
                "model_name": MODEL,
                "inputs": [tensor],
                "request_id": rid,
                "outputs": [InferRequestedOutput(n) for n in OUTPUTS],
            }
        done.set()

    failures = 0
    answered = 0
    try:
        call = client.stream_infer(requests(), stream_timeout=timeout_s)
        # The aio client drops the request id of error responses; the raw
        # responses keep it, so they are read directly.
        async for response in call._grpc_call:
            rid = response.infer_response.id
            index, seconds = sent.pop(rid, (-1, 0.0))
            answered += 1
            if response.error_message:
                failures += 1
                LOG.error("frame %s: %s", index, response.error_message)
            else:
                result = InferResult(response.infer_response)
                for line in _plate_lines(result, index, seconds, formats):
                    print(line, flush=True)
            if done.is_set() and not sent:
                break
        call.cancel()
    finally:
        await client.close()
    LOG.info("%d frames answered, %d failed", answered, failures)
    return 1 if failures else 0


def _plate_lines(
    result: InferResult, index: int, seconds: float, formats: PlateFormats
) -> Iterator[str]:
    boxes, scores = result.as_numpy("boxes"), result.as_numpy("det_scores")
    texts, text_scores = result.as_numpy("texts"), result.as_numpy("text_scores")
    for i in range(len(scores)):
        text = texts[i].decode()
        yield json.dumps(
            {
                "frame": index,
                "time_s": round(seconds, 3),
                "text": text,
                "valid": formats.is_valid(text),
                "text_score": round(float(text_scores[i]), 3),
                "det_score": round(float(scores[i]), 3),
                "box": [round(float(v), 1) for v in boxes[i]],
            }
        )


def _cmd_recognise(args: argparse.Namespace) -> int:
    if not args.path.is_file():
        print(f"error: {args.path} does not exist", file=sys.stderr)
        return 2
    if args.triton_url:
        return asyncio.run(_recognise(args.triton_url, args.path, args.every, args.timeout))
    repository = DEFAULT_MODEL_REPOSITORY
    if not (repository / "build_info.json").is_file():
        print("error: model_repository/ is not built: run `make models`", file=sys.stderr)
        return 2
    LOG.info("starting the embedded Triton on %s", repository)
    with EmbeddedTriton(repository) as server:
        return asyncio.run(_recognise(server.grpc_url, args.path, args.every, args.timeout))


def _cmd_run(args: argparse.Namespace) -> int:
    from streamer.app import Service
    from streamer.config.schema import ConfigError, load_config
    from streamer.ops.startup import StartupError

    try:
        settings = load_config(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    setup_logging(args.log_level or settings.log.level, settings.log.format)
    try:
        return asyncio.run(Service(settings, once=args.once).run())
    except StartupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _cmd_replay(args: argparse.Namespace) -> int:
    from streamer.cli.replay import load_truth, markdown, replay_settings, report_json, run_replay
    from streamer.config.schema import ConfigError, load_config
    from streamer.ops.startup import StartupError

    try:
        settings = load_config(args.config)
        truth = load_truth(args.truth)
        replay_settings(settings, truth)  # the truth's cameras must be in the config
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    setup_logging(args.log_level or settings.log.level, settings.log.format)
    try:
        code, scores, total = asyncio.run(run_replay(settings, truth))
    except StartupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    table = markdown(scores, total)
    print(table, end="")
    if args.json is not None:
        args.json.write_text(report_json(scores, total) + "\n", encoding="utf-8")
    if args.markdown is not None:
        args.markdown.write_text(table, encoding="utf-8")
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m streamer")
    parser.add_argument("--log-level", help="overrides log.level of the config")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the service on a YAML config")
    run.add_argument("--config", type=Path, required=True, help="YAML config (configs/demo.yaml)")
    run.add_argument("--once", action="store_true", help="play file cameras once, then exit")
    run.set_defaults(func=_cmd_run)
    deadletters.add_parser(sub)
    recognise = sub.add_parser("recognise", help="print the plates of a video or image file")
    recognise.add_argument("path", type=Path)
    recognise.add_argument("--every", type=int, default=3, help="send every Nth frame")
    recognise.add_argument("--triton-url", help="host:port of a running Triton (gRPC)")
    recognise.add_argument("--timeout", type=float, default=600.0, help="stream deadline, s")
    recognise.set_defaults(func=_cmd_recognise)
    replay = sub.add_parser(
        "replay", help="play clips as fast as possible and score the events against a truth"
    )
    replay.add_argument("--config", type=Path, required=True, help="YAML config of the clips")
    replay.add_argument("--truth", type=Path, required=True, help="YAML: camera -> [plates]")
    replay.add_argument("--json", type=Path, help="also write the report as JSON here")
    replay.add_argument("--markdown", type=Path, help="also write the table here")
    replay.set_defaults(func=_cmd_replay)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.log_level is not None:
        from streamer.config.schema import LogConfig

        levels = typing.get_args(LogConfig.model_fields["level"].annotation)
        if args.log_level.upper() not in levels:
            print(
                f"error: --log-level must be one of {', '.join(levels)}, got {args.log_level!r}",
                file=sys.stderr,
            )
            return 2
        args.log_level = args.log_level.upper()
    setup_logging(args.log_level or "INFO")
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
