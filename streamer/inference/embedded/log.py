"""The embedded Triton's log: one logger for this package, the server's output routed to it.

Every module of ``streamer.inference.embedded`` but the watchdog logs to :data:`LOG`, named
``streamer.inference.embedded.server``: that is the name whose level streamer/foundation/logs.py,
the tests and the benches set (Triton's INFO chatter is for debugging), so the server's output
and the lifecycle of its process stay under one switch.

:class:`ServerLog` forwards each line ``tritonserver`` prints at the level Triton gave it
(``E``/``W``/``I`` prefixes; lines a CPU-only machine always prints at DEBUG) and keeps the
last ones, from which a failed start is explained. A line that says what one said less than
:data:`REPEAT_WINDOW_S` ago (its time and thread aside) is counted, not forwarded: a model
that fails logs one line per request, which is one line per frame; the next one forwarded
says how many were held back.
"""

from __future__ import annotations

import collections
import logging
import math
import re
import time
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
#: A Triton line's prefix: level, date, time, thread id (``E1202 11:06:03.080326 5949 ``).
_PREFIX = re.compile(r"^[EWI]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ ")
#: A line repeated within this many seconds of the last one forwarded is counted, not logged.
REPEAT_WINDOW_S = 30.0
#: Distinct lines whose repeats are tracked (the oldest is forgotten first).
_REPEATS_TRACKED = 64
_LEVELS = {"E": logging.ERROR, "W": logging.WARNING, "I": logging.INFO}


class ServerLog:
    """The last :data:`KEEP_LINES` lines one server printed, each forwarded to :data:`LOG`."""

    def __init__(self, keep: int = KEEP_LINES, repeat_window_s: float = REPEAT_WINDOW_S) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=keep)
        self.repeat_window_s = repeat_window_s
        #: A forwarded line's text (prefix removed) -> when it was forwarded, repeats held back.
        self._forwarded: collections.OrderedDict[str, tuple[float, int]] = collections.OrderedDict()

    def clear(self) -> None:
        """Forget the lines of an earlier run."""
        self._lines.clear()
        self._forwarded.clear()

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
            held_back = self._repeats(line)
            if held_back is None:
                continue
            if held_back:
                LOG.log(level, "tritonserver: %s (and %d more like it)", line, held_back)
            else:
                LOG.log(level, "tritonserver: %s", line)
        stream.close()

    def _repeats(self, line: str) -> int | None:
        """None: ``line`` repeats one forwarded less than ``repeat_window_s`` ago (counted);
        else how many of it were held back since it was last forwarded."""
        if not _PREFIX.match(line):
            return 0  # not a log record (a table of the startup summary, say): kept whole
        text = _PREFIX.sub("", line)
        now = time.monotonic()
        forwarded_at, held_back = self._forwarded.get(text, (-math.inf, 0))
        if now - forwarded_at < self.repeat_window_s:
            self._forwarded[text] = (forwarded_at, held_back + 1)
            return None
        self._forwarded[text] = (now, 0)
        self._forwarded.move_to_end(text)
        while len(self._forwarded) > _REPEATS_TRACKED:
            self._forwarded.popitem(last=False)
        return held_back

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
