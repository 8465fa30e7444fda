"""The event history at scale: insert rate, search latency and disk use per event.

    .venv/bin/python -m bench.store [--events 1000000] [--out FILE]

A history of ``--events`` passes is loaded in bulk into the real schema (streamer/store/
sqlite.py) over 50 cameras, a year of first-seen times and 200,000 distinct plates; the
first ``PICTURED`` of them with a 3 kB plate crop and a 25 kB vehicle picture (pictures live
in their own table, which searches never read; at 1 million a full set would take 28 GB of
this machine's disk for no change in the figures). Then, through the
store's own API (``SQLiteEventStore.add`` and ``search``, on its database thread):

* the insert rate of 2,000 more events, one ``add`` each (as the publisher does);
* the latency of 200 searches of each kind: an exact plate, a prefix, a fuzzy plate, a
  camera over a day, a known-plate label, and the second page of a camera's events;
* the file's size per event.

Target (issue 15): search p99 <= 100 ms at 1 million events. Prints a Markdown table and
writes the figures as JSON to ``--out`` (default bench/results/store.json).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import sqlite3
import statistics
import string
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, log
from streamer.delivery.events import build_event
from streamer.store.base import EventQuery
from streamer.store.sqlite import SQLiteEventStore
from tests.plate_passes import a_pass

TARGET_P99_S = 0.1
CAMERAS = 50
PLATES = 200_000
YEAR_S = 365 * 86_400.0
T0 = 1_767_225_600.0
CROP_BYTES, FRAME_BYTES = 3_000, 25_000
SEARCHES = 200
INSERTS = 2_000
PICTURED = 10_000


def _plate(rng: random.Random) -> str:
    letters = "ABCEHKMOPTXY"
    return (
        rng.choice(letters)
        + "".join(rng.choices(string.digits, k=3))
        + "".join(rng.choices(letters, k=2))
        + "".join(rng.choices(string.digits, k=rng.choice((2, 3))))
    )


def _bulk_load(path: Path, events: int, rng: random.Random) -> list[str]:
    """``events`` passes written straight into the schema (the store created it); the plates."""
    plates = [_plate(rng) for _ in range(PLATES)]
    crop, frame = rng.randbytes(CROP_BYTES), rng.randbytes(FRAME_BYTES)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    batch = 10_000
    for start in range(0, events, batch):
        rows, versions, pictures = [], [], []
        for i in range(start, min(start + batch, events)):
            event_id, text = str(uuid.UUID(int=rng.getrandbits(128))), rng.choice(plates)
            camera, first_seen = f"cam{i % CAMERAS}", T0 + YEAR_S * i / events
            label = "staff" if i % 97 == 0 else None
            payload = json.dumps({"event_id": event_id, "camera": camera, "text": text})
            rows.append((event_id, camera, text, label, 0, first_seen, 1, payload))
            versions.append((event_id, 1, payload))
            if i < PICTURED:
                pictures.append((event_id, crop, frame))
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO passes (event_id, camera, text, label, alert, first_seen, version, "
            "payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.executemany("INSERT INTO versions VALUES (?, ?, ?)", versions)
        conn.executemany("INSERT INTO pictures VALUES (?, ?, ?)", pictures)
        conn.execute("COMMIT")
        if start % 100_000 == 0:
            log(f"store: {start + len(rows):,} events loaded")
    conn.close()
    return plates


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def _measure(path: Path, plates: list[str], rng: random.Random) -> dict[str, Any]:
    store = await SQLiteEventStore.open(path)
    try:
        template = await build_event(a_pass(), 80, 640)
        started = time.perf_counter()
        for _ in range(INSERTS):
            await store.add(
                dataclasses.replace(template, event_id=str(uuid.uuid4()), text=rng.choice(plates))
            )
        insert_rate = INSERTS / (time.perf_counter() - started)

        async def second_page(camera: str) -> EventQuery:
            first = await store.search(EventQuery(camera=camera, limit=50))
            return EventQuery(camera=camera, limit=50, cursor=first.next_cursor)

        kinds: dict[str, Any] = {
            "exact plate": lambda: EventQuery(plate=rng.choice(plates)),
            "prefix (4 characters)": lambda: EventQuery(plate=rng.choice(plates)[:4], prefix=True),
            "fuzzy plate": lambda: EventQuery(plate=rng.choice(plates)[:-1], fuzzy=True),
            "camera, one day": lambda: _day(rng),
            "label": lambda: EventQuery(label="staff"),
        }
        latency: dict[str, dict[str, float]] = {}
        for name, make in kinds.items():
            times = []
            for _ in range(SEARCHES if name != "fuzzy plate" else SEARCHES // 10):
                query = make()
                t = time.perf_counter()
                await store.search(query)
                times.append(time.perf_counter() - t)
            latency[name] = _summary(times)
        times = []
        for _ in range(SEARCHES):
            query = await second_page(f"cam{rng.randrange(CAMERAS)}")
            t = time.perf_counter()
            await store.search(query)
            times.append(time.perf_counter() - t)
        latency["a camera's second page"] = _summary(times)
        return {"insert_per_s": round(insert_rate, 1), "search_s": latency}
    finally:
        await store.close()


def _day(rng: random.Random) -> EventQuery:
    start = T0 + rng.uniform(0, YEAR_S - 86_400)
    return EventQuery(camera=f"cam{rng.randrange(CAMERAS)}", after=start, before=start + 86_400)


def _summary(times: list[float]) -> dict[str, float]:
    # Microseconds kept: an indexed page of a small history takes well under 0.1 ms.
    return {
        "p50": round(statistics.median(times), 6),
        "p99": round(_percentile(times, 0.99), 6),
        "n": len(times),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "store.json")
    args = parser.parse_args(argv)
    rng = random.Random(15)
    with tempfile.TemporaryDirectory(prefix="lpr-bench-store-") as folder:
        path = Path(folder) / "events.sqlite3"
        asyncio.run(_create(path))  # the schema, as the service creates it
        started = time.perf_counter()
        plates = _bulk_load(path, args.events, rng)
        log(f"store: {args.events:,} events loaded in {time.perf_counter() - started:.0f} s")
        result = asyncio.run(_measure(path, plates, rng))
        size = path.stat().st_size
        pictured = min(PICTURED, args.events) + INSERTS
        pictures = _picture_bytes(path)
        result.update(
            events=args.events,
            row_bytes_per_event=round((size - pictures) / (args.events + INSERTS)),
            picture_bytes_per_event=round(pictures / pictured),
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"| store, {args.events:,} events | p50 | p99 | target p99 |")
    print("| --- | --- | --- | --- |")
    for name, figures in result["search_s"].items():
        verdict = "met" if figures["p99"] <= TARGET_P99_S else "missed"
        print(
            f"| {name} | {figures['p50'] * 1000:.1f} ms | {figures['p99'] * 1000:.1f} ms | "
            f"<= {TARGET_P99_S * 1000:.0f} ms: {verdict} |"
        )
    print(
        f"\ninsert: {result['insert_per_s']} events/s; disk per event: "
        f"{result['row_bytes_per_event']} B of rows and indexes, "
        f"{result['picture_bytes_per_event']} B of pictures"
    )


def _picture_bytes(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        total = conn.execute(
            "SELECT coalesce(sum(length(crop) + coalesce(length(frame), 0)), 0) FROM pictures"
        ).fetchone()[0]
    return int(total)


async def _create(path: Path) -> None:
    store = await SQLiteEventStore.open(path)
    await store.close()


if __name__ == "__main__":
    main()
