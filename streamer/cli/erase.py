"""``python -m streamer erase``: take every trace of a plate (or one pass) out of the files.

::

    python -m streamer erase --config FILE (--plate TEXT | --event-id ID)

It works on the config's history (``storage.path``) and outbox (``outbox.path``), and may
run next to the service (SQLite WAL); a running service also keeps recent events in memory,
and the MQTT broker a camera's last event: erase through ``DELETE /api/events?plate=`` there.
It prints what it took out as JSON, never the plate; the audit line goes to the log
(streamer/store/erasure.py).

Exit codes: 0 done (also when nothing held the plate); 1 a file failed; 2 a bad config or
bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

from streamer.cli.arguments import settings_or_exit
from streamer.config import Settings
from streamer.delivery.outbox import Outbox, OutboxError
from streamer.store import erasure
from streamer.store.base import StoreError, open_event_store


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``erase`` to an ``add_subparsers()`` object (of ``python -m streamer``)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "erase", help="erase every trace of a plate (or one pass) from the history and outbox"
    )
    parser.add_argument("--config", type=Path, required=True, help="the service's YAML config")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--plate", help="the plate text (spaces and case do not matter)")
    which.add_argument("--event-id", help="one pass, by its event id")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    settings = settings_or_exit(args.config)
    if args.plate is not None and not any(ch.isalnum() for ch in args.plate):
        print("error: --plate has no letter or digit", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        erased = asyncio.run(_erase(args, settings))
    except (StoreError, OutboxError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"erased": erased.to_dict()}))
    return 0


async def _erase(args: argparse.Namespace, settings: Settings) -> erasure.Erased:
    store = outbox = None
    try:
        storage = settings.storage
        if storage.backend == "postgresql" or storage.path.is_file():
            store = await open_event_store(storage)
        if settings.outbox.path.is_file():
            targets = settings.configured_targets
            outbox = await Outbox.open(settings.outbox.path, targets, create=False)
        return await erasure.erase(
            plate=args.plate,
            event_id=args.event_id,
            store=store,
            outbox=outbox,
            recent=None,
            trigger="command line",
        )
    finally:
        if store is not None:
            await store.close()
        if outbox is not None:
            await outbox.close()
