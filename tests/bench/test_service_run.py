"""bench/service_run.py's RecordingSink: a pass counts once, with its last version's text."""

from __future__ import annotations

import dataclasses

from bench.service_run import RecordingSink
from tests.webhook_receiver import make_event


async def test_a_correction_replaces_the_pass_text_and_is_no_new_event() -> None:
    sink = RecordingSink()
    first = dataclasses.replace(make_event("gate"), text="C567AM76")
    other = make_event("yard")
    correction = dataclasses.replace(first, text="O567AM76", version=2, previous_text="C567AM76")
    for event in (first, other, correction):
        await sink.publish(event)
    assert sink.texts == ["O567AM76", other.text]
    assert sink.cameras == ["gate", "yard"] and len(sink.latencies_s) == 2
    assert sink.corrections == 1
