"""The recent events kept in memory: each pass at its newest version, bounded."""

from __future__ import annotations

import asyncio
import dataclasses

from streamer.delivery.events import build_event
from streamer.delivery.recent_events import RecentEvents
from tests.plate_passes import a_pass


def test_recent_events_give_each_pass_at_its_newest_version() -> None:
    log = RecentEvents(limit=10)
    first, other = a_pass(), dataclasses.replace(a_pass(), event_id="other")
    corrected = dataclasses.replace(a_pass(), version=2, previous_text="C567AM76")
    for plate_pass in (first, other, corrected):
        log.add(asyncio.run(build_event(plate_pass, 80)))
    assert [(e.event_id, e.version) for e in log.latest()] == [("other", 1), (first.event_id, 2)]
    assert log.find(first.event_id).version == 2  # type: ignore[union-attr]  # a bare id: newest
    assert log.find(f"{first.event_id}.v2").version == 2  # type: ignore[union-attr]
    assert log.find("nobody") is None
    for i in range(12):  # bounded: the oldest go first
        log.add(asyncio.run(build_event(dataclasses.replace(a_pass(), event_id=f"p{i}"), 80)))
    assert len(log.events) == 10 and log.find("other") is None
