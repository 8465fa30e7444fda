"""A withheld pass is never silent: the real service on the real clip and a CPU Triton, with
``events.min_confidence`` above any confidence, so that both of the clip's passes are decided
but withheld. Each gives one INFO line, is in the history as withheld (and not among the
reported passes), and ``python -m streamer replay`` lists it with its fate."""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from asyncio.subprocess import PIPE
from pathlib import Path

import pytest

from converters import assets
from streamer.app import Service
from streamer.config import load_config
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.store.base import EventQuery
from streamer.store.sqlite import SQLiteEventStore

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
PLATES = {"O567AM76", "Y836XH76"}
PROJECT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, url: str) -> Path:
    config = tmp_path / "withheld.yaml"
    config.write_text(
        "cameras:\n"
        f"  - name: yard\n    url: '{CLIP}'\n    sample_fps: 5\n    realtime: false\n"
        f"triton: {{url: '{url}'}}\n"
        # Above every confidence the fusion gives: every pass is withheld.
        f"events: {{stdout: false, file: '{tmp_path / 'events.jsonl'}', min_confidence: 1.0}}\n"
        f"storage: {{path: '{tmp_path / 'history.sqlite3'}'}}\n"
        f"outbox: {{path: '{tmp_path / 'outbox.sqlite3'}'}}\n"
        "metrics: {enabled: false}\nweb: {enabled: false}\n"
    )
    return config


async def test_a_withheld_pass_is_logged_kept_and_listed(
    tmp_path: Path, triton_server: EmbeddedTriton, caplog: pytest.LogCaptureFixture
) -> None:
    config = _config(tmp_path, triton_server.grpc_url)
    caplog.set_level(logging.INFO, logger="streamer")
    service = Service(load_config(config), once=True)
    assert await asyncio.wait_for(service.run(), 600) == 0

    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("withheld ")]
    print("\n".join(lines))
    assert sorted(line.split()[2] for line in lines) == sorted(PLATES), lines
    # (Under 1.0, every one, though two decimals may round it up to 1.00.)
    assert all(
        re.search(r" on yard \(track \d+, \d+ reads, confidence [01]\.\d\d", line) for line in lines
    )
    assert all("confidence under events.min_confidence" in line for line in lines)
    events = tmp_path / "events.jsonl"
    assert not events.exists() or not events.read_text()  # no plate was reported

    store = await SQLiteEventStore.open(tmp_path / "history.sqlite3")
    try:
        withheld = (await store.search(EventQuery(withheld=True))).events
        reported = (await store.search(EventQuery())).events
    finally:
        await store.close()
    assert {e.payload["text"] for e in withheld} == PLATES
    assert {(e.payload["type"], e.payload["withheld"]) for e in withheld} == {
        ("plate.withheld", "low_confidence")
    }
    assert reported == []
    ids = {line.split()[1].rstrip(":") for line in lines}
    assert {e.event_id for e in withheld} == ids

    truth = tmp_path / "truth.yaml"
    truth.write_text("yard: [O567AM76, Y836XH76]\n")
    command = ["-m", "streamer", "replay", "--config", str(config), "--truth", str(truth)]
    replay = await asyncio.create_subprocess_exec(
        sys.executable, *command, cwd=PROJECT, stdout=PIPE, stderr=PIPE
    )
    out, err = await asyncio.wait_for(replay.communicate(), 600)
    assert replay.returncode == 0, err.decode()[-2000:]
    stdout = out.decode()
    rows = [line for line in stdout.splitlines() if line.startswith("| yard | ")]
    listed = {row.split(" | ")[3] for row in rows if row.split(" | ")[2] == "withheld"}
    assert listed == PLATES, stdout
    assert all("low_confidence" in row for row in rows if "| withheld |" in row)
