"""Command line of the service.

``python -m streamer run --config FILE [--once] [--shard I/N]``: the service (with
``--shard``, one replica of N: only its cameras, streamer/foundation/shards.py). Runs until
SIGINT/SIGTERM, which stop it cleanly (exit 0); with ``--once`` file cameras play once and it
exits when every camera has ended and every consumer of the event log has caught up (or
``--drain-timeout`` passed), after a line per camera and per consumer (exit 1 when a camera
never delivered a frame or Triton answered none, 3 when a consumer has events left). A bad
config or usage exits with code 2; a start-up failure a user can fix
(streamer/ops/startup.py) with one line and code 1.

``python -m streamer replay --config FILE --truth TRUTH.yaml``: play the config's clips
once, as fast as possible, and score the events against the truth (streamer/cli/replay.py).
Exit 0 with the report (whatever the scores), 1 when a clip never delivered a frame, Triton
answered none or the service could not start, 2 a bad config, truth or usage.

``python -m streamer check --config FILE``: the config, each camera (probed), each Triton
and each sink, one line each, exit 1 when one fails (streamer/cli/check.py).

``python -m streamer recognise FILE``: read a video or image file, send sampled
frames to the ``plate_recognition`` model and print one JSON line per plate
found. With no ``--triton-url`` an embedded CPU Triton is started on
``model_repository/`` and stopped at the end (streamer/cli/recognise.py).

``python -m streamer deadletters list | redrive``: the webhook dead letters
(streamer/cli/deadletters.py).

``python -m streamer erase --config FILE --plate TEXT``: every trace of a plate out of the
history and the outbox (streamer/cli/erase.py).

``python -m streamer triton [--grpc-port 8001]``: the CPU Triton on its own, until stopped
(streamer/cli/triton.py).

``python -m streamer --version``: the package, the embedded Triton and the model repository
(streamer/ops/version_report.py). A mistyped command or option is answered with the closest one
(``unknown command 'rnu': did you mean 'run'?``, :class:`Parser`) and exit code 2, as every
usage error. Every command exits 130 when interrupted (Ctrl-C) outside the service's own
signal handling. The codes, per command, are in the README (Exit codes).
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import os
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from streamer.cli import check, deadletters, erase, recognise, triton
from streamer.cli.arguments import non_negative_seconds, settings_or_exit
from streamer.delivery.consumers import CATCH_UP_TIMEOUT_S
from streamer.foundation.allocator import tune_allocator
from streamer.foundation.logs import setup_logging
from streamer.foundation.paths import DEFAULT_MODEL_REPOSITORY
from streamer.foundation.shards import Shard


class Parser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose errors name the closest command or option
    to a mistyped one, found with :mod:`difflib` among its own choices and option strings
    (Python 3.14's ``suggest_on_error``; 3.11 has none). The parsers of its sub-commands are
    of this class too (``add_subparsers`` makes them with the parent's class).

    * a command: ``unknown command 'rnu': did you mean 'run'?``;
    * an option: ``unrecognized argument '--confg': did you mean '--config'?``, also where
      argparse would have said something else first (``--config`` missing, say).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._given: list[str] = []  # what this parser was given to parse, for error()

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        parsed, extras = super().parse_known_args(args, namespace)
        if hint := self._misspelt_option(extras):
            self.error(hint)
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        # A misspelt option is the likelier cause of what argparse says ("the following
        # arguments are required: --config" for "--confg", "invalid choice: 'DEBUG'" for
        # "--log-levl DEBUG"), so its hint comes first.
        if "did you mean" not in message:
            message = self._misspelt_option(self._own(self._given)) or message
        super().error(message)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is not None and value not in choices:
            close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
            if close:
                what = "command" if isinstance(choices, dict) else "choice"  # dict: subparsers
                self.error(f"unknown {what} {value!r}: did you mean {close[0]!r}?")
        super()._check_value(action, value)

    def _own(self, tokens: list[str]) -> list[str]:
        """The tokens this parser reads itself: those before its command, if it has commands."""
        commands = {c for a in self._actions if isinstance(a.choices, dict) for c in a.choices}
        for at, token in enumerate(tokens):
            if token in commands:
                return tokens[:at]
        return tokens

    def _misspelt_option(self, tokens: list[str]) -> str | None:
        """``unrecognized argument 'X': did you mean 'Y'?`` for the first of ``tokens`` that
        looks like an option this parser does not know but one it knows is close to."""
        known = list(self._option_string_actions)
        for token in tokens:
            name = token.split("=", 1)[0]
            if not name.startswith("-") or name == "-" or name[1:2].isdigit():
                continue  # a value, stdin, or a negative number
            if any(option.startswith(name) for option in known):
                continue  # known, or an abbreviation argparse accepts
            # Compared without their dashes, which every option shares.
            bare = {option.lstrip("-"): option for option in known}
            close = difflib.get_close_matches(name.lstrip("-"), list(bare), n=1)
            if close:
                return f"unrecognized argument {name!r}: did you mean {bare[close[0]]!r}?"
        return None


class _Version(argparse.Action):
    """``--version``: the versions (streamer/ops/version_report.py), read only when asked."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from streamer.ops.version_report import version_report

        print(version_report(DEFAULT_MODEL_REPOSITORY))
        parser.exit()


def _cmd_run(args: argparse.Namespace) -> int:
    from streamer.app import Service
    from streamer.ops.startup import StartupError

    settings = settings_or_exit(args.config)
    setup_logging(args.log_level or settings.log.level, settings.log.format)
    tune_allocator()  # before the cameras' threads start
    try:
        service = Service(
            settings,
            once=args.once,
            config_path=args.config,
            shard=args.shard,
            drain_timeout_s=args.drain_timeout,
        )
        return asyncio.run(service.run())
    except StartupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _cmd_replay(args: argparse.Namespace) -> int:
    from streamer.cli.replay import (
        Collector,
        fates_markdown,
        load_truth,
        markdown,
        replay_settings,
        report_json,
        run_replay,
    )
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
        collector = Collector()
        code, scores, total = asyncio.run(run_replay(settings, truth, collector))
    except StartupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    table = markdown(scores, total) + "\nTracks:\n\n" + fates_markdown(collector.fates, truth)
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


def _log_levels() -> tuple[str, ...]:
    from streamer.config import LogConfig

    return typing.get_args(LogConfig.model_fields["level"].annotation)


def build_parser() -> Parser:
    parser = Parser(prog="python -m streamer", description="Licence plates from camera streams.")
    parser.add_argument(
        "--version",
        action=_Version,
        help="print the versions of the package, the embedded Triton and the model repository",
    )
    parser.add_argument(
        "--log-level",
        metavar="LEVEL",
        help=f"{', '.join(_log_levels())}; overrides log.level of the config (default INFO)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", help="run the service on a YAML config")
    run.add_argument("--config", type=Path, required=True, help="YAML config (configs/demo.yaml)")
    run.add_argument("--once", action="store_true", help="play file cameras once, then exit")
    run.add_argument(
        "--drain-timeout",
        type=non_negative_seconds,
        default=CATCH_UP_TIMEOUT_S,
        metavar="S",
        help="with --once: seconds every consumer (history, stdout, file, webhooks, MQTT) "
        "may take to deliver what is left once the cameras ended (default "
        f"{CATCH_UP_TIMEOUT_S:g}); then exit 3 if events are left",
    )
    run.add_argument(
        "--shard",
        type=_shard,
        default=os.environ.get("LPR_SHARD") or None,
        metavar="I/N",
        help="run only the cameras of replica I of N (auto/N: I from the host name's "
        "trailing number, as a StatefulSet names its pods); default $LPR_SHARD, else all",
    )
    run.set_defaults(func=_cmd_run)
    check.add_parser(sub)
    deadletters.add_parser(sub)
    erase.add_parser(sub)
    recognise.add_parser(sub)
    triton.add_parser(sub)
    replay = sub.add_parser(
        "replay", help="play clips as fast as possible and score the events against a truth"
    )
    replay.add_argument(
        "--config", type=Path, required=True, help="YAML config whose cameras are the clips"
    )
    replay.add_argument(
        "--truth",
        type=Path,
        required=True,
        help="YAML mapping each camera to the plates that pass in its clip ([] for none)",
    )
    replay.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    replay.add_argument(
        "--markdown", type=Path, help="also write the report's table (Markdown) to this file"
    )
    replay.set_defaults(func=_cmd_replay)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and run the command; its exit code."""
    try:
        args = build_parser().parse_args(argv)
        if args.log_level is not None:
            levels = _log_levels()
            if args.log_level.upper() not in levels:
                print(
                    f"error: --log-level must be one of {', '.join(levels)}, "
                    f"got {args.log_level!r}",
                    file=sys.stderr,
                )
                return 2
            args.log_level = args.log_level.upper()
        setup_logging(args.log_level or "INFO")
        try:
            return int(args.func(args))
        except SystemExit as exc:  # a command's own exit (a config that does not load: 2)
            return exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt:
        return 130
