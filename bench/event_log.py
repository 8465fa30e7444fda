"""The durable event log: its commit rate, its throughput to three consumers, and how well a
hung consumer is kept from the others.

    .venv/bin/python -m bench.event_log [--events 2000] [--rate 20] [--seconds 15]
        [--rounds 2] [--out FILE]

Everything runs in this process, on the real parts (streamer/delivery/consumers.py): the
log (``Consumers.open`` on a SQLite outbox in a temporary folder), the history
(``HistoryDeliverer`` on ``SQLiteEventStore``), a JSON-lines file (``JsonLinesDeliverer``)
and a webhook target (``WebhookPoster``, ``max_concurrency`` 4) that POSTs to a real aiohttp
receiver on 127.0.0.1 (it answers 204 and notes when each ``webhook-id`` arrived). Events are
built directly: a 200x60 plate crop (~3 kB JPEG) and a 640x360 vehicle picture (~50 kB JPEG
at quality 80), a new uuid4 each, four cameras in turn.

1. Throughput: the three consumers; ``--events`` events appended one after another as
   fast as the log commits them (``await Consumers.append``), then the wait until every
   consumer has caught up. Commits per second (events / time of the appends), events per
   second through the log to all three (events / first append until ``wait_caught_up``
   returns), and when each consumer had delivered the last one.
2. Isolation: ``--rate`` events per second for ``--seconds`` to the history, the webhook
   and a third consumer that is (a) healthy, a JSON-lines file, or (b) hung, a JSON-lines
   file whose path is a FIFO nobody reads (its writes block). The webhook's lag per event
   (its arrival at the receiver minus the return of its append): median and p95 of (a) and
   (b), and (b) / (a) of each, target <= 1.2. Runs interleave a, b, a, b (``--rounds``);
   the figures are medians over the rounds.

About 1.5 minutes on 2 cores by default. Prints a Markdown table; writes the figures as
JSON to ``--out`` (default bench/results/event_log.json).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import select
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from aiohttp import web

from bench.common import RESULTS_DIR, log, percentile, run_meta
from streamer.config import OutboxConfig, WebhookTargetConfig
from streamer.delivery.consumers import Consumers
from streamer.delivery.deliverer import Deliverer
from streamer.delivery.events import PlateEvent, Sighting
from streamer.delivery.jsonl_delivery import JsonLinesDeliverer
from streamer.delivery.webhook_delivery import WebhookPoster
from streamer.foundation.metrics import Metrics
from streamer.store.history_delivery import HistoryDeliverer
from streamer.store.sqlite import SQLiteEventStore

TARGET_LAG_RATIO = 1.2
CAMERAS = 4
WEBHOOK = "receiver"
WEBHOOK_CONCURRENCY = 4
#: Distinct pictures the events take in turn (each event has its own id and text).
PICTURES = 16
JPEG_QUALITY = 80
#: Seconds the consumers may take to catch up (throughput) or the webhook to receive the
#: last event (isolation) before the run counts as failed.
CATCH_UP_TIMEOUT_S = 600.0
ARRIVAL_TIMEOUT_S = 60.0
#: Seconds between two looks at the consumers' progress (when each finished).
WATCH_INTERVAL_S = 0.005


# -- events ------------------------------------------------------------------------------


def _noisy_jpeg(rng: np.random.Generator, height: int, width: int) -> bytes:
    """A JPEG of blotches and sensor noise: about the size a real picture has."""
    cell = 12
    base = rng.integers(0, 256, (height // cell + 1, width // cell + 1, 3), dtype=np.uint8)
    image = cv2.resize(base, (width, height), interpolation=cv2.INTER_LINEAR).astype(np.float64)
    image += rng.normal(0.0, 6.0, image.shape)
    pixels = np.clip(image, 0, 255).astype(np.uint8)
    ok, encoded = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return encoded.tobytes()


class EventBuilder:
    """Plate events as the publisher makes them, without a pipeline."""

    def __init__(self, seed: int = 27) -> None:
        rng = np.random.default_rng(seed)
        self.crops = [_noisy_jpeg(rng, 60, 200) for _ in range(PICTURES)]
        self.frames = [_noisy_jpeg(rng, 360, 640) for _ in range(PICTURES)]
        self._count = 0

    def event(self) -> PlateEvent:
        n = self._count
        self._count += 1
        text = f"A{n % 1000:03d}BC{77 + n % 20}"
        now = time.time()
        seen = Sighting(time.strftime("%Y-%m-%dT%H:%M:%S.000+00:00", time.gmtime(now)), n * 0.5)
        left = Sighting(
            time.strftime("%Y-%m-%dT%H:%M:%S.000+00:00", time.gmtime(now + 2)), n * 0.5 + 2
        )
        return PlateEvent(
            event_id=str(uuid.uuid4()),
            camera=f"cam{n % CAMERAS}",
            text=text,
            confidence=0.93,
            candidates=[(text, 0.93), (text[:-1] + "8", 0.04)],
            track_id=n,
            reads=12,
            evidence=9,
            first_seen=seen,
            last_seen=left,
            box=(612.0, 540.0, 812.0, 600.0),
            crop_jpeg=self.crops[n % PICTURES],
            reason="confident",
            first_seen_monotonic=time.monotonic(),
            decided_after_s=2.0,
            char_confidence=tuple(0.9 for _ in text),
            frame_jpeg=self.frames[n % PICTURES],
        )


# -- the webhook receiver ------------------------------------------------------------------


class Receiver:
    """A webhook receiver on 127.0.0.1: answers 204, notes each message's first arrival."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}  # webhook-id -> time.monotonic() of arrival
        self._runner: web.AppRunner | None = None
        self._changed = asyncio.Event()
        self.url = ""

    async def start(self) -> Receiver:
        app = web.Application(client_max_size=2**24)
        app.router.add_post("/hook", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/hook"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        at = time.monotonic()
        await request.read()
        self.arrived.setdefault(request.headers["webhook-id"], at)
        self._changed.set()
        return web.Response(status=204)

    async def wait_for(self, ids: list[str], timeout_s: float) -> bool:
        """Wait until every message of ``ids`` arrived; False if ``timeout_s`` passed first."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while any(i not in self.arrived for i in ids):
                    self._changed.clear()
                    await self._changed.wait()
                return True
        return False


# -- the consumers -------------------------------------------------------------------------


async def _open(
    folder: Path, third: Deliverer, receiver: Receiver, metrics: Metrics
) -> tuple[Consumers, SQLiteEventStore]:
    """The log in ``folder`` with the history, the webhook target and ``third``."""
    store = await SQLiteEventStore.open(folder / "history.sqlite3")
    secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    webhook = WebhookTargetConfig(
        name=WEBHOOK,
        url=receiver.url,
        secret=secret,
        max_concurrency=WEBHOOK_CONCURRENCY,
    )
    deliverers: list[Deliverer] = [
        HistoryDeliverer(store, metrics),
        WebhookPoster(webhook, metrics),
        third,
    ]
    consumers = await Consumers.open(
        OutboxConfig(path=folder / "outbox.sqlite3"),
        deliverers,
        metrics,
        poll_interval_s=1.0,
    )
    return consumers, store


async def _throughput(events: int, builder: EventBuilder, receiver: Receiver) -> dict[str, Any]:
    batch = [builder.event() for _ in range(events)]
    with tempfile.TemporaryDirectory(prefix="lpr-bench-log-") as name:
        folder = Path(name)
        metrics = Metrics()
        lines = folder / "events.jsonl"
        consumers, store = await _open(
            folder, JsonLinesDeliverer(metrics, lines), receiver, metrics
        )
        finished: dict[str, float] = {}
        started = time.monotonic()

        async def watch() -> None:
            while len(finished) < len(consumers.targets):
                for target in consumers.targets:
                    worker = consumers.worker(target)
                    if target not in finished and worker and worker.delivered >= events:
                        finished[target] = time.monotonic() - started
                await asyncio.sleep(WATCH_INTERVAL_S)

        watcher = asyncio.create_task(watch())
        try:
            for i, event in enumerate(batch):
                await consumers.append(event)
                if (i + 1) % 500 == 0:
                    log(f"event_log: throughput: {i + 1:,} events committed")
            appended_s = time.monotonic() - started
            progress = await consumers.wait_caught_up(CATCH_UP_TIMEOUT_S)
            caught_up_s = time.monotonic() - started
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await watcher
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await consumers.close()
            await store.close()
        left = {target: p.pending for target, p in progress.items() if p.pending}
        if left:
            raise RuntimeError(f"consumers did not catch up in {CATCH_UP_TIMEOUT_S:g} s: {left}")
        written = sum(1 for _ in lines.open(encoding="utf-8"))
        arrived = sum(1 for e in batch if e.event_id in receiver.arrived)
        if written != events or arrived != events:
            raise RuntimeError(f"{written} lines in the file, {arrived} POSTs of {events} events")
    log(
        f"event_log: throughput: {events:,} appended in {appended_s:.2f} s, all caught up "
        f"after {caught_up_s:.2f} s"
    )
    return {
        "events": events,
        "append_s": round(appended_s, 3),
        "commits_per_s": round(events / appended_s, 1),
        "caught_up_s": round(caught_up_s, 3),
        "through_per_s": round(events / caught_up_s, 1),
        "finished_s": {target: round(s, 3) for target, s in sorted(finished.items())},
        "frame_bytes": round(statistics.mean(len(f) for f in builder.frames)),
        "crop_bytes": round(statistics.mean(len(c) for c in builder.crops)),
    }


def _drain(path: Path, stop: threading.Event) -> None:
    """Read the FIFO ``path`` (a hung consumer's file) until ``stop``: its writer unblocks."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], 0.05)
            chunk = b""
            if ready:
                with contextlib.suppress(BlockingIOError):
                    chunk = os.read(fd, 1 << 16)
            if chunk:
                continue
            if stop.is_set():
                return
            if ready:  # no writer at the moment (not yet opened, or closed): EOF
                time.sleep(0.01)
    finally:
        os.close(fd)


async def _isolation_run(
    hung: bool, rate: float, seconds: float, builder: EventBuilder, receiver: Receiver
) -> dict[str, Any]:
    """One run at ``rate`` for ``seconds``; the third consumer hung (a FIFO) or a file."""
    count = max(1, round(rate * seconds))
    with tempfile.TemporaryDirectory(prefix="lpr-bench-log-") as name:
        folder = Path(name)
        metrics = Metrics()
        path = folder / ("hung.fifo" if hung else "events.jsonl")
        if hung:
            os.mkfifo(path)
        consumers, store = await _open(folder, JsonLinesDeliverer(metrics, path), receiver, metrics)
        appended: dict[str, float] = {}
        stop = threading.Event()
        drainer: threading.Thread | None = None
        try:
            started = time.monotonic()
            for i in range(count):
                await asyncio.sleep(max(0.0, started + i / rate - time.monotonic()))
                event = builder.event()
                await consumers.append(event)
                appended[event.event_id] = time.monotonic()
            ids = list(appended)
            if not await receiver.wait_for(ids, ARRIVAL_TIMEOUT_S):
                missing = sum(1 for i in ids if i not in receiver.arrived)
                raise RuntimeError(f"{missing} of {count} events never reached the webhook")
            late_s = time.monotonic() - started - seconds
            third = consumers.worker("file")
            third_delivered = third.delivered if third is not None else 0
            history = consumers.worker("history")
            history_delivered = history.delivered if history is not None else 0
        finally:
            if hung:  # the blocked write (an open() of the FIFO) goes through, and the rest
                drainer = threading.Thread(target=_drain, args=(path, stop), daemon=True)
                drainer.start()
            await consumers.close()
            stop.set()
            if drainer is not None:
                drainer.join(timeout=10)
            await store.close()
    lags = [receiver.arrived[i] - appended[i] for i in ids]
    return {
        "third": "hung" if hung else "healthy",
        "events": count,
        "lag_median_s": statistics.median(lags),
        "lag_p95_s": percentile(lags, 95) or 0.0,
        "lag_max_s": max(lags),
        "last_arrival_after_end_s": round(late_s, 3),
        "third_delivered": third_delivered,
        "history_delivered": history_delivered,
    }


async def _isolation(
    rounds: int, rate: float, seconds: float, builder: EventBuilder, receiver: Receiver
) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"healthy": [], "hung": []}
    for r in range(rounds):
        for hung in (False, True):
            kind = "hung" if hung else "healthy"
            log(f"event_log: isolation round {r + 1}/{rounds}, third consumer {kind}")
            run = await _isolation_run(hung, rate, seconds, builder, receiver)
            log(
                f"event_log:   webhook lag median {run['lag_median_s'] * 1000:.1f} ms, "
                f"p95 {run['lag_p95_s'] * 1000:.1f} ms; third consumer delivered "
                f"{run['third_delivered']} of {run['events']}"
            )
            runs[kind].append(run)
    result: dict[str, Any] = {"rate_per_s": rate, "seconds": seconds, "rounds": rounds}
    for stat in ("lag_median_s", "lag_p95_s"):
        a = statistics.median(run[stat] for run in runs["healthy"])
        b = statistics.median(run[stat] for run in runs["hung"])
        result[stat] = {
            "healthy": round(a, 5),
            "hung": round(b, 5),
            "ratio": round(b / a, 3) if a > 0 else None,
            "per_round_ratio": [
                round(h[stat] / g[stat], 3) if g[stat] > 0 else None
                for g, h in zip(runs["healthy"], runs["hung"], strict=True)
            ],
        }
    result["runs"] = [
        {k: round(v, 5) if isinstance(v, float) else v for k, v in run.items()}
        for pair in zip(runs["healthy"], runs["hung"], strict=True)
        for run in pair
    ]
    return result


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    builder = EventBuilder()
    receiver = await Receiver().start()
    try:
        log(f"event_log: throughput, {args.events:,} events to 3 consumers")
        throughput = await _throughput(args.events, builder, receiver)
        isolation = await _isolation(args.rounds, args.rate, args.seconds, builder, receiver)
    finally:
        await receiver.stop()
    return {"throughput": throughput, "isolation": isolation}


def _print_table(result: dict[str, Any]) -> None:
    t, iso = result["throughput"], result["isolation"]
    print(f"| event log, {t['events']:,} events | figure |")
    print("| --- | --- |")
    print(f"| commits (appends one after another) | {t['commits_per_s']:,.0f} events/s |")
    print(f"| through the log to all 3 consumers | {t['through_per_s']:,.0f} events/s |")
    for target, s in t["finished_s"].items():
        print(f"| {target}: last event delivered after | {s:.2f} s |")
    print()
    print(
        f"| webhook lag, {iso['rate_per_s']:g} events/s for {iso['seconds']:g} s "
        f"(median of {iso['rounds']} rounds) | third healthy | third hung | hung / healthy "
        f"| target |"
    )
    print("| --- | --- | --- | --- | --- |")
    for stat, label in (("lag_median_s", "median"), ("lag_p95_s", "p95")):
        figures = iso[stat]
        ratio = figures["ratio"]
        verdict = "met" if ratio is not None and ratio <= TARGET_LAG_RATIO else "missed"
        shown = f"{ratio:.2f}" if ratio is not None else "n/a"
        print(
            f"| {label} | {figures['healthy'] * 1000:.1f} ms | {figures['hung'] * 1000:.1f} ms "
            f"| {shown} | <= {TARGET_LAG_RATIO:g}: {verdict} |"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=2000, help="events of the throughput run")
    parser.add_argument("--rate", type=float, default=20.0, help="events/s of isolation runs")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of isolation runs")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of isolation (a, b)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "event_log.json")
    args = parser.parse_args(argv)
    started = time.monotonic()
    meta = run_meta(sys.argv if argv is None else ["bench.event_log", *argv])
    result = asyncio.run(_measure(args))
    result["meta"] = meta
    result["wall_s"] = round(time.monotonic() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    log(f"event_log: {result['wall_s']:.0f} s; figures in {args.out}")
    _print_table(result)


if __name__ == "__main__":
    main()
