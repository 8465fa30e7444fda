"""stdout and ``events.file`` as consumers of a real event log: lines in the log's order, the
file's with the crop; a file that blocks (a FIFO nobody reads: a hung network file system)
parks one thread and holds up no other consumer, and its lines come once each when it
unblocks."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path

import pytest

from streamer.config import OutboxConfig
from streamer.delivery.consumers import Consumers
from streamer.delivery.deliverer import LocalDeliverer
from streamer.delivery.jsonl_delivery import JsonLinesDeliverer
from streamer.foundation.metrics import Metrics
from tests.streamer.delivery.webhook_setup import FAST
from tests.webhook_receiver import eventually, make_event


async def test_stdout_and_the_file_get_every_event_in_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = Metrics()
    path = tmp_path / "sub" / "events.jsonl"
    file, stdout = JsonLinesDeliverer(metrics, path), JsonLinesDeliverer(metrics)
    consumers = await Consumers.open(
        OutboxConfig(path=tmp_path / "outbox.sqlite3"), [file, stdout], metrics, **FAST
    )
    events = [make_event("gate" if i % 2 else "yard") for i in range(6)]
    try:
        for event in events:
            await consumers.append(event)
        progress = await consumers.wait_caught_up(10)
    finally:
        await consumers.close()
    assert {name: (p.delivered, p.pending) for name, p in progress.items()} == {
        "file": (6, 0),
        "stdout": (6, 0),
    }
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["event_id"] for line in lines] == [e.event_id for e in events]
    assert all("crop_jpeg_base64" in line for line in lines)
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["event_id"] for line in printed] == [e.event_id for e in events]
    assert not any("crop_jpeg_base64" in line for line in printed)


async def test_a_blocked_file_holds_up_no_other_consumer_and_parks_one_thread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = Metrics()
    fifo = tmp_path / "events.jsonl"
    os.mkfifo(fifo)  # opening it for writing blocks until someone reads: a hung file system
    file = JsonLinesDeliverer(metrics, fifo)
    file.timeout_s = 0.3
    stdout = JsonLinesDeliverer(metrics)
    consumers = await Consumers.open(
        OutboxConfig(path=tmp_path / "outbox.sqlite3"), [file, stdout], metrics, **FAST
    )
    events = [make_event() for _ in range(5)]
    reader: asyncio.Task[bytes] | None = None
    try:
        for event in events:
            await consumers.append(event)
        await eventually(lambda: _printed(stdout) == 5, 10, "stdout's five lines")
        await asyncio.sleep(1.5)  # several attempts of the file, each timing out
        threads = [t for t in threading.enumerate() if t.name.startswith("file")]
        assert len(threads) == 1  # one write blocked, no thread parked per attempt
        assert isinstance(file, LocalDeliverer) and "no answer within" in (file.problem or "")
        assert (await consumers.outbox.stats("file")).depth == 5
        reader = asyncio.create_task(asyncio.to_thread(_read_fifo, fifo, 5))
        progress = await consumers.wait_caught_up(15)
        assert progress["file"].pending == 0 and file.problem is None
    finally:
        await consumers.close()
    assert reader is not None
    lines = [json.loads(line) for line in (await reader).decode().splitlines()]
    assert [line["event_id"] for line in lines] == [e.event_id for e in events]  # once each


def _printed(stdout: JsonLinesDeliverer) -> int:
    return (
        stdout.metrics.registry.get_sample_value(  # type: ignore[return-value]
            "lpr_consumer_deliveries_total", {"consumer": "stdout", "outcome": "delivered"}
        )
        or 0
    )


def _read_fifo(path: Path, lines: int) -> bytes:
    """Read ``lines`` lines from the FIFO (the writer keeps it open)."""
    with path.open("rb") as fifo:
        return b"".join(fifo.readline() for _ in range(lines))
