"""The event log on a real full file system (a small tmpfs mounted by the test) while events
arrive: commits fail, the events wait in memory, readiness says not ready; once space is
freed every event is committed and delivered to a real webhook receiver, once, in order."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamer.delivery.publisher import LOG_PART, EventPublisher
from streamer.foundation.metrics import Metrics
from streamer.ops import health
from tests.plate_passes import a_pass
from tests.streamer.delivery.webhook_setup import open_sink, settings, target
from tests.webhook_receiver import Receiver, eventually


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of this test's own (root: CI and these machines run tests as root)."""
    if os.geteuid() != 0:
        pytest.fail("mounting a tmpfs needs root (as CI runs the tests)")
    mount = tmp_path / "fs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(folder: Path) -> Path:
    """Fill the file system of ``folder`` to the last byte; the filler file."""
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as out:
        for size in (1 << 20, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * size)
    statvfs = os.statvfs(folder)
    assert statvfs.f_bavail == 0, "the file system is not full"
    return filler


async def test_a_full_disk_delays_events_and_loses_none(small_fs: Path, receiver: Receiver) -> None:
    metrics = Metrics()
    config = settings(small_fs, target("rx", receiver.url, receiver.secret))
    consumers = await open_sink(config, metrics)
    publisher = EventPublisher(metrics, jpeg_quality=80, queue_max_bytes=2**24)
    publisher.log = consumers
    run = asyncio.create_task(publisher.run())
    passes = [dataclasses.replace(a_pass(), event_id=f"pass-{i:02d}") for i in range(12)]
    try:
        await publisher.publish(passes[:2])
        await eventually(lambda: len(receiver.delivered()) == 2, 10, "the first two")
        filler = _fill(small_fs)
        with pytest.raises(OSError) as full:
            (small_fs / "more").write_bytes(b"x" * 4096)
        assert full.value.errno == errno.ENOSPC
        for plate_pass in passes[2:]:
            await publisher.publish([plate_pass])  # the pipeline is not held up
            await asyncio.sleep(0.05)
        await eventually(lambda: LOG_PART in publisher.failing, 10, "the failing commit")
        sinks = _sinks(publisher, consumers)  # (no Triton here: readiness's own verdict is off)
        assert "disk is full" in str(sinks[LOG_PART]) and "outbox" in sinks
        assert len(receiver.delivered()) == 2 and publisher.waiting >= 9

        filler.unlink()  # space again
        assert await publisher.drain(30)
        await eventually(lambda: len(receiver.delivered()) == 12, 30, "every event")
        assert receiver.delivered_ids() == [p.event_id for p in passes]  # once each, in order
        await eventually(lambda: _sinks(publisher, consumers) == "ok", 15, "ready again")
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        await consumers.close()


def _sinks(publisher: EventPublisher, consumers: object) -> object:
    """What ``/readyz`` says of the event log and its consumers."""
    _, details = health.readiness(
        recognizer=None,
        watchdog=None,
        supervisor=consumers.supervisor,  # type: ignore[attr-defined]
        publisher=publisher,
        consumers=consumers,  # type: ignore[arg-type]
        cameras=[],
    )
    return details["sinks"]
