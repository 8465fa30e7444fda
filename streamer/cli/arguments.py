"""argparse ``type=`` functions shared by the command lines (``python -m streamer`` and
``python -m converters``): a bad value is a usage error that argparse reports naming the
option, exit code 2; and the config file of a command, whose errors are exit code 2 too."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streamer.config import Settings


def settings_or_exit(path: Path) -> Settings:
    """The config at ``path``; a config that does not load is printed (the file, the key, the
    reason) and ends the command with exit code 2."""
    from streamer.config import ConfigError, load_config  # (not for the converters' CLI)

    try:
        return load_config(path)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def positive_int(text: str) -> int:
    """argparse ``type=``: an integer of 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """argparse ``type=``: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be above 0 seconds, got {text}")
    return value


def non_negative_seconds(text: str) -> float:
    """argparse ``type=``: a finite number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be 0 seconds or more, got {text}")
    return value
