"""Erasure: every trace of a plate (or one pass) taken out of the history, the outbox and
memory, with an audit line that does not name the plate.

What goes: the passes of the history that hold the plate anywhere (the text of any of their
versions, a candidate, the text a correction replaced, the known plate matched), with their
pictures; the outbox's events that hold it, once every target has them (one not delivered
yet stays, to be delivered, and is counted: erase again after its delivery); the recent
events the live view keeps in memory; the MQTT broker's retained ``last`` message of a camera
when it holds the plate. SQLite overwrites what it deletes, so nothing is left
in the files' free pages.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from streamer.delivery.outbox import Outbox
from streamer.delivery.publisher import EventLog
from streamer.store.base import EventStore, normalise_plate

LOG = logging.getLogger(__name__)


class RetainedMessages(Protocol):
    """What a broker holds for later subscribers (streamer/delivery/outbox_sink.py)."""

    async def forget(self, *, plate: str | None = None, event_id: str | None = None) -> int: ...


@dataclass
class Erased:
    """What an erasure took out; never names the plate."""

    history: int = 0
    outbox: int = 0
    outbox_pending: int = 0
    recent: int = 0
    mqtt_retained: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "history": self.history,
            "outbox": self.outbox,
            "outbox_pending": self.outbox_pending,
            "recent": self.recent,
            "mqtt_retained": self.mqtt_retained,
        }


async def erase(
    *,
    plate: str | None = None,
    event_id: str | None = None,
    store: EventStore | None,
    outbox: Outbox | None,
    recent: EventLog | None,
    trigger: str,
    retained: RetainedMessages | None = None,
) -> Erased:
    """Erase ``plate`` everywhere, or the pass ``event_id``; logs the audit line."""
    if (plate is None) == (event_id is None):
        raise ValueError("erase by plate or by event id")
    erased = Erased()
    text = normalise_plate(plate) if plate is not None else None
    if text is not None and not text:
        raise ValueError("the plate has no letter or digit")
    if store is not None:
        erased.history = await store.erase(plate=text, event_id=event_id)
    if outbox is not None:
        needle = json.dumps(text) if text is not None else json.dumps(event_id)
        erased.outbox, erased.outbox_pending = await outbox.erase_delivered(needle)
    if recent is not None:
        erased.recent = recent.forget(plate=text, event_id=event_id)
    if retained is not None:
        erased.mqtt_retained = await retained.forget(plate=text, event_id=event_id)
    what = "a plate" if text is not None else "one pass"
    LOG.warning(
        "erasure of %s (%s): %d pass(es) from the history, %d delivered outbox event(s), "
        "%d recent, %d retained MQTT message(s); %d not delivered yet kept in the outbox "
        "(erase again once delivered)",
        what,
        trigger,
        erased.history,
        erased.outbox,
        erased.recent,
        erased.mqtt_retained,
        erased.outbox_pending,
    )
    return erased
