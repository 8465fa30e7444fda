"""Events as JSON lines, to stdout (``events.stdout``) or appended to ``events.file``: two
consumers of the event log.

Each reads the log at its own pace like every other consumer (streamer/delivery/consumers.py):
a line is written once its event is committed, in the order of the log (one event at a
time). The writes run on the consumer's own thread, never the shared default executor: a
file on a hung network file system blocks that one thread, and its events wait in the log
(``lpr_outbox_depth{target="file"}`` grows) while the history, webhooks and frame
preparation go on. A write that timed out and went through after all is not written again;
one that failed is (a line may then appear twice: deduplicate on ``event_id`` and
``version``, as for every consumer).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from streamer.config import FILE_CONSUMER, STDOUT_CONSUMER
from streamer.delivery.deliverer import LocalDeliverer
from streamer.delivery.outbox_sql import PendingDelivery
from streamer.foundation.metrics import Metrics


class JsonLinesDeliverer(LocalDeliverer):
    """One JSON object per event and line: to stdout (without the crop) or to a file (with
    ``crop_jpeg_base64``, as docs/events.md shows it)."""

    def __init__(self, metrics: Metrics, path: Path | None = None) -> None:
        super().__init__(FILE_CONSUMER if path is not None else STDOUT_CONSUMER, metrics)
        self.path = path
        self.with_crop = path is not None
        self._file: IO[str] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)

    def describe(self) -> str:
        return f"events file {self.path}" if self.path is not None else "stdout"

    def line(self, item: PendingDelivery) -> str:
        """The line of ``item``: its payload, with the crop for a file."""
        payload = dict(item.payload)
        if self.with_crop and item.crop is not None:
            payload["crop_jpeg_base64"] = base64.b64encode(item.crop).decode("ascii")
        return json.dumps(payload, ensure_ascii=False) + "\n"

    async def write(self, item: PendingDelivery) -> None:
        line = self.line(item)
        await asyncio.get_running_loop().run_in_executor(self._executor, self._write, line)

    def _write(self, line: str) -> None:
        if self.path is None:
            sys.stdout.write(line)  # (looked up each time: a test may have replaced it)
            sys.stdout.flush()
            return
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        try:
            self._file.write(line)
            self._file.flush()
        except OSError:
            # A partial line may be in the buffer: start the next try on a fresh handle.
            file, self._file = self._file, None
            with contextlib.suppress(OSError):
                file.close()
            raise

    async def close(self) -> None:
        await super().close()
        file, self._file = self._file, None
        if file is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, _close, file)
        self._executor.shutdown(wait=False)


def _close(file: IO[str]) -> None:
    with contextlib.suppress(OSError):
        file.close()
