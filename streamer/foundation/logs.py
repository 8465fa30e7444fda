"""Logging set-up: text or JSON lines, with credentials scrubbed from every record.

Camera URLs are logged in their redacted form by the code that logs them; the
filter here is the safety net for anything else (a library's exception text
that quotes the URL, say), with the one rule of streamer/foundation/redact.py.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from streamer.foundation.redact import redact_text

_FORMATTER = logging.Formatter()


class RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact_text(message)
        if record.exc_info and record.exc_info[1] is not None:
            # Formatted here, once, so that the text can be scrubbed: the stack is kept, the
            # secrets an exception message quotes are not.
            record.exc_text = redact_text(_FORMATTER.formatException(record.exc_info))
            record.exc_info = None
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_text:
            payload["error"] = record.exc_text
        return json.dumps(payload, ensure_ascii=False)


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Configure the root logger once: to stderr (stdout carries the events)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RedactingFilter())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Triton's own log is routed line by line; its INFO chatter is for debugging.
    logging.getLogger("streamer.inference.embedded.server").setLevel(
        max(logging.WARNING, root.level)
    )
