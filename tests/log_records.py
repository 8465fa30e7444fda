"""Helpers for tests that look at log records."""

from __future__ import annotations

import logging


def traceback_of(record: logging.LogRecord) -> str:
    """The traceback a log record carries: formatted from ``exc_info``, or the text the
    service's RedactingFilter formatted (and scrubbed) in its place once logging is set up
    (streamer/foundation/logs.py), as it is after any test that ran the command line in-process."""
    if record.exc_info:
        return logging.Formatter().formatException(record.exc_info)
    return record.exc_text or ""
