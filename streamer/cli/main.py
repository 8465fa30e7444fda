"""Command line of the service.

``python -m streamer run --config FILE [--once] [--shard I/N]``: the service (with
``--shard``, one replica of N: only its cameras, streamer/pipeline/shards.py). Runs until
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
``model_repository/`` and stopped at the end (streamer/cli/recognise.py).

``python -m streamer deadletters list | redrive``: the webhook dead letters
(streamer/cli/deadletters.py).

``python -m streamer erase --config FILE --plate TEXT``: every trace of a plate out of the
history and the outbox (streamer/cli/erase.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import typing
from pathlib import Path

from streamer.cli import deadletters, erase, recognise
from streamer.ops.logs import setup_logging
from streamer.pipeline.shards import Shard


def _cmd_run(args: argparse.Namespace) -> int:
    from streamer.app import Service
    from streamer.config import ConfigError, load_config
    from streamer.ops.startup import StartupError

    try:
        settings = load_config(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    setup_logging(args.log_level or settings.log.level, settings.log.format)
    try:
        service = Service(settings, once=args.once, config_path=args.config, shard=args.shard)
        return asyncio.run(service.run())
    except StartupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _cmd_replay(args: argparse.Namespace) -> int:
    from streamer.cli.replay import load_truth, markdown, replay_settings, report_json, run_replay
    from streamer.config import ConfigError, load_config
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


def _shard(text: str) -> Shard:
    try:
        return Shard.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m streamer")
    parser.add_argument("--log-level", help="overrides log.level of the config")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the service on a YAML config")
    run.add_argument("--config", type=Path, required=True, help="YAML config (configs/demo.yaml)")
    run.add_argument("--once", action="store_true", help="play file cameras once, then exit")
    run.add_argument(
        "--shard",
        type=_shard,
        default=os.environ.get("LPR_SHARD") or None,
        metavar="I/N",
        help="run only the cameras of replica I of N (auto/N: I from the host name's "
        "trailing number, as a StatefulSet names its pods); default $LPR_SHARD, else all",
    )
    run.set_defaults(func=_cmd_run)
    deadletters.add_parser(sub)
    erase.add_parser(sub)
    recognise.add_parser(sub)
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
        from streamer.config import LogConfig

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
