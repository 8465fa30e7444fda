"""``python -m streamer deadletters``: see and re-drive the webhook dead letters.

::

    python -m streamer deadletters list    --config FILE [--target T]
    python -m streamer deadletters redrive --config FILE [--target T] (--event-id ID ... | --all)

``list`` prints one line per dead letter (event, target, camera, plate, when, attempts,
reason); it reads only the config's ``outbox`` section, so it needs none of the targets'
secrets in the environment. ``redrive`` puts dead letters back to pending, due now: a
running service picks them up within a few seconds (it looks at the outbox every
``streamer.delivery.consumers.POLL_INTERVAL_S``), a stopped one at its next start. It
works on the outbox file of the config (``outbox.path``) and may run next to the service
(SQLite WAL: the service keeps delivering meanwhile).

Exit codes: 0 done; 1 the outbox is missing or failed, or an ``--event-id`` is not a
dead letter; 2 a bad config or bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from streamer.config import ConfigError, load_config, load_outbox_config
from streamer.delivery.outbox import Outbox, OutboxError
from streamer.delivery.outbox_sql import DeadLetter

#: Widest reason shown in the table (the outbox keeps the whole of it).
REASON_WIDTH = 80


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``deadletters`` to an ``add_subparsers()`` object (of ``python -m streamer``)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "deadletters", help="list or re-drive events given up on (dead letters)"
    )
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="print the dead letters")
    redrive = actions.add_parser("redrive", help="deliver dead letters again")
    for sub in (listing, redrive):
        sub.add_argument("--config", type=Path, required=True, help="the service's YAML config")
        sub.add_argument("--target", help="only this webhook target (default: every target)")
    which = redrive.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--event-id",
        dest="event_ids",
        action="append",
        metavar="ID",
        help="the event id of a dead letter to re-drive (repeatable)",
    )
    which.add_argument("--all", action="store_true", help="every dead letter (of --target)")
    parser.set_defaults(func=run)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m streamer")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``main(["deadletters", "list", "--config", "site.yaml"])``; returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or bad arguments (2)
        return int(exc.code or 0)
    return run(args)


def run(args: argparse.Namespace) -> int:
    """Run a parsed ``deadletters`` command.

    ``list`` reads the ``outbox`` section only (:func:`load_outbox_config`): the local file
    is listed without the secrets the targets take from the environment. ``redrive``
    reads the whole config, so that the targets it re-drives to are the configured ones.
    """
    try:
        if args.action == "list":
            outbox_path, configured = load_outbox_config(args.config).path, None
        else:
            settings = load_config(args.config)
            outbox_path, configured = settings.outbox.path, settings.configured_targets
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if configured is not None and args.target is not None and args.target not in configured:
        shown = ", ".join(configured) or "none"
        print(
            f"warning: target {args.target!r} is not in the config (configured: {shown})",
            file=sys.stderr,
        )
    try:
        return asyncio.run(_run(args, outbox_path, configured or []))
    except OutboxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


async def _run(args: argparse.Namespace, outbox_path: Path, targets: list[str]) -> int:
    outbox = await Outbox.open(outbox_path, targets, create=False)
    try:
        dead = await outbox.dead_letters(args.target)
        if args.action == "list":
            print_table(dead, sys.stdout)
            return 0
        if args.all:
            count = await outbox.redrive(None, args.target)
            missing: list[str] = []
        else:
            known = {d.event_id for d in dead}
            wanted = list(dict.fromkeys(args.event_ids))
            missing = [i for i in wanted if i not in known]
            found = [i for i in wanted if i in known]
            count = await outbox.redrive(found, args.target) if found else 0
        for event_id in missing:
            print(f"not a dead letter: {event_id}", file=sys.stderr)
        scope = f" of target {args.target}" if args.target else ""
        print(f"re-driven: {count} dead letter(s){scope}")
        return 1 if missing else 0
    finally:
        await outbox.close()


def print_table(dead: Sequence[DeadLetter], out: TextIO) -> None:
    if not dead:
        print("no dead letters", file=out)
        return
    header = ("EVENT ID", "TARGET", "CAMERA", "PLATE", "CREATED (UTC)", "ATTEMPTS", "REASON")
    rows = [header]
    for d in dead:
        created = datetime.fromtimestamp(d.created_at, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        reason = d.reason if len(d.reason) <= REASON_WIDTH else d.reason[: REASON_WIDTH - 3] + "..."
        rows.append(
            (d.event_id, d.target, d.camera, d.text or "", created, str(d.attempts), reason)
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        print("  ".join([*cells, row[-1]]).rstrip(), file=out)
    print(f"{len(dead)} dead letter(s)", file=out)
