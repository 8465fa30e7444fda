"""Erasure: every trace of a plate (or one pass) taken out of the history, the event log,
the broker's retained messages and memory, with an audit line that does not name the plate.

What goes, in this order:

1. the passes still open in the trackers that hold the plate: not reported, ever
   (``open_passes``: streamer/pipeline/cameras.py);
2. the recent events the live view keeps in memory, and the events waiting to be committed
   to the log (streamer/delivery/publisher.py);
3. in the event log, the passes found so far are recorded as erased (by id: an id is no
   personal data), so that a later correction or a queued version of one is refused by the
   log; then every event that holds the plate, whatever its consumers' states (pending,
   delivered, dead letters, rows of removed targets), in transactions of
   ``outbox.ERASE_BATCH`` events with the progress logged;
4. the history's passes that hold the plate anywhere (the text of any of their versions,
   a candidate, the text a correction replaced, the known plate matched), with their
   pictures;
5. the MQTT broker's retained ``last`` message of a camera when it holds the plate or one
   of the erased passes: now, or at the next connect when the broker is down (the log's
   erasure records say so again after a restart).

SQLite overwrites what it deletes, so nothing is left in the files' free pages. What a
consumer already took is out of reach: a webhook receiver's copy, the lines of
``events.file`` and stdout.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from streamer.delivery.outbox import Outbox
from streamer.store.base import EventStore, normalise_plate

if TYPE_CHECKING:
    from streamer.delivery.publisher import EventPublisher
    from streamer.delivery.recent_events import RecentEvents

LOG = logging.getLogger(__name__)

#: An erasure's progress is logged after each batch once it has removed this many events.
PROGRESS_FROM = 1000


class RetainedMessages(Protocol):
    """What a broker holds for later subscribers (streamer/delivery/consumers.py)."""

    async def forget(self, *, plate: str | None = None, event_id: str | None = None) -> int: ...

    async def erase_passes(self, pass_ids: set[str]) -> int: ...


#: The trackers' open passes that hold ``plate`` (or are the pass ``event_id``), stopped:
#: how many, and the ids of those already reported.
OpenPasses = Callable[[str | None, str | None], tuple[int, set[str]]]


@dataclass
class Erased:
    """What an erasure took out; never names the plate."""

    history: int = 0
    outbox: int = 0
    open_passes: int = 0
    queued: int = 0
    recent: int = 0
    mqtt_retained: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "history": self.history,
            "outbox": self.outbox,
            "open_passes": self.open_passes,
            "queued": self.queued,
            "recent": self.recent,
            "mqtt_retained": self.mqtt_retained,
        }


async def erase(
    *,
    plate: str | None = None,
    event_id: str | None = None,
    store: EventStore | None,
    outbox: Outbox | None,
    recent: RecentEvents | None,
    trigger: str,
    retained: RetainedMessages | None = None,
    publisher: EventPublisher | None = None,
    open_passes: OpenPasses | None = None,
) -> Erased:
    """Erase ``plate`` everywhere, or the pass ``event_id`` (see the module docstring); logs
    the audit line."""
    if (plate is None) == (event_id is None):
        raise ValueError("erase by plate or by event id")
    erased = Erased()
    text = normalise_plate(plate) if plate is not None else None
    if text is not None and not text:
        raise ValueError("the plate has no letter or digit")
    what = "a plate" if text is not None else "one pass"
    ids: set[str] = {event_id} if event_id is not None else set()
    if open_passes is not None:
        erased.open_passes, stopped = open_passes(text, event_id)
        ids |= stopped
    if recent is not None:
        forgotten = recent.forget(plate=text, event_id=event_id)
        erased.recent = len(forgotten)
        ids |= forgotten
    if publisher is not None:
        before = len(ids)
        ids = publisher.erase(ids, text)
        erased.queued = len(ids) - before
    if outbox is not None:
        await outbox.record_erased(ids)
        needle = json.dumps(text if text is not None else event_id)

        def progress(count: int) -> None:
            if count >= PROGRESS_FROM:
                LOG.info(
                    "erasure of %s (%s): %d event(s) out of the log so far", what, trigger, count
                )

        erased.outbox, logged = await outbox.erase(needle, progress=progress)
        ids |= logged
        if publisher is not None:
            publisher.erased |= ids
    if store is not None:
        erased.history = await store.erase(plate=text, event_id=event_id)
    if retained is not None:
        erased.mqtt_retained = await retained.forget(plate=text, event_id=event_id)
        erased.mqtt_retained += await retained.erase_passes(ids)
    LOG.warning(
        "erasure of %s (%s): %d pass(es) from the history, %d event(s) from the event log, "
        "%d open pass(es) stopped, %d queued, %d recent, %d retained MQTT message(s) cleared "
        "(more at the next connect if the broker is down)",
        what,
        trigger,
        erased.history,
        erased.outbox,
        erased.open_passes,
        erased.queued,
        erased.recent,
        erased.mqtt_retained,
    )
    return erased
