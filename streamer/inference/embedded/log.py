"""The embedded Triton's log: one logger for this package, the server's output routed to it.

Every module of ``streamer.inference.embedded`` but the watchdog logs to :data:`LOG`, named
``streamer.inference.embedded.server``: that is the name whose level streamer/ops/logs.py,
the tests and the benches set (Triton's INFO chatter is for debugging), so the server's output
and the lifecycle of its process stay under one switch.

:class:`ServerLog` forwards each line ``tritonserver`` prints at the level Triton gave it
(``E``/``W``/``I`` prefixes; lines a CPU-only machine always prints at DEBUG) and keeps the
last ones, from which a failed start is explained.
"""

from __future__ import annotations

import collections
import logging
import re
from typing import IO

LOGGER_NAME = "streamer.inference.embedded.server"
LOG = logging.getLogger(LOGGER_NAME)

#: Lines of the server's output kept in memory.
KEEP_LINES = 200
#: Lines of the log's end that a failure's message shows (and ``log_tail`` returns).
TAIL_LINES = 40
#: Error lines that a failure's message shows (the last ones), each cut to this length.
_ERRORS_SHOWN = 10
_ERROR_LINE_MAX = 1000
# Lines that a CPU-only machine always prints at start: logged at DEBUG.
_HARMLESS = re.compile(
    r"NVML|DCGM|CudaDriverHelper|pinned system memory|CUDA driver version is insufficient"
    r"|CUDA memory pool|cuda_memory_manager|GPU metrics"
)
_PORT_IN_USE = re.compile(r"Socket '[^']*:(\d+)' already in use")
_TABLE_RULE = re.compile(r"^\+-+\+")  # the +----+ rules of the startup tables
_TRITON_LINE = re.compile(r"^([EWI])\d{4} ")
_LEVELS = {"E": logging.ERROR, "W": logging.WARNING, "I": logging.INFO}


class ServerLog:
    """The last :data:`KEEP_LINES` lines one server printed, each forwarded to :data:`LOG`."""

    def __init__(self, keep: int = KEEP_LINES) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=keep)

    def clear(self) -> None:
        """Forget the lines of an earlier run."""
        self._lines.clear()

    def pump(self, stream: IO[bytes]) -> None:
        """Forward ``stream`` (the server's stdout and stderr) line by line until it ends."""
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip()
            if not line:
                continue
            self._lines.append(line)
            match = _TRITON_LINE.match(line)
            level = _LEVELS[match.group(1)] if match else logging.INFO
            if _HARMLESS.search(line):
                level = logging.DEBUG
            LOG.log(level, "tritonserver: %s", line)
        stream.close()

    def tail(self, n: int = TAIL_LINES) -> list[str]:
        """The last ``n`` lines."""
        return list(self._lines)[-n:]

    def errors(self) -> list[str]:
        """The error lines kept (not the harmless ones), each cut to a bounded length."""
        return [
            ln[:_ERROR_LINE_MAX]
            for ln in list(self._lines)
            if ln.startswith("E") and not _HARMLESS.search(ln)
        ]

    def first_error(self) -> str | None:
        """The first error line kept (a model that failed to load is named there), if any."""
        errors = self.errors()
        return errors[0] if errors else None

    def failure_summary(self) -> str:
        """Error lines of the log (model load failures name the model), then its tail."""
        errors = self.errors()
        tail = [ln for ln in list(self._lines) if not _TABLE_RULE.match(ln)][-TAIL_LINES:]
        parts = []
        if errors:
            parts.append("errors:\n" + "\n".join(errors[-_ERRORS_SHOWN:]))
        parts.append("last log lines:\n" + "\n".join(tail))
        return "\n".join(parts)

    def ports_in_use(self) -> set[int]:
        """Ports the log's tail says were taken by another process when the server bound."""
        return {int(p) for p in _PORT_IN_USE.findall("\n".join(self.tail()))}
