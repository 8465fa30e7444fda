"""The recent events the service keeps in memory (the live view, the API), and the plate
texts an event holds (what an erasure looks for)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streamer.delivery.events import PlateEvent


@dataclass
class RecentEvents:
    """Recent event messages kept in memory for the API and tests (bounded): a pass's first
    report and its corrections, oldest first; and who watches them come (the page's live
    updates)."""

    limit: int = 200
    events: list[PlateEvent] = field(default_factory=list)
    #: Called with each new message, on the event loop; they must not block or raise.
    watchers: list[Callable[[PlateEvent], None]] = field(default_factory=list)

    def add(self, event: PlateEvent) -> None:
        self.events.append(event)
        del self.events[: -self.limit]
        for watcher in list(self.watchers):
            watcher(event)

    def watch(self, watcher: Callable[[PlateEvent], None]) -> Callable[[], None]:
        """Call ``watcher`` with every new message until the returned function is called."""
        self.watchers.append(watcher)
        return lambda: self.watchers.remove(watcher) if watcher in self.watchers else None

    def latest(self) -> list[PlateEvent]:
        """The newest version of each pass, ordered by when that version came."""
        newest = {e.event_id: e for e in self.events}
        return [e for e in self.events if newest[e.event_id] is e]

    def forget(self, *, plate: str | None = None, event_id: str | None = None) -> set[str]:
        """Drop every message of the passes that hold ``plate`` (any text of theirs) or of
        the pass ``event_id`` (an erasure); the passes' ids."""
        ids = {
            e.event_id
            for e in self.events
            if e.event_id == event_id or (plate is not None and plate in texts_of(e))
        }
        self.events = [e for e in self.events if e.event_id not in ids]
        return ids

    def find(self, message_id: str) -> PlateEvent | None:
        """A message by its id; a bare event id gives the pass's newest version."""
        return next(
            (e for e in reversed(self.events) if message_id in (e.message_id, e.event_id)), None
        )


def texts_of(event: PlateEvent) -> set[str]:
    """Every plate text an event holds: its own, its candidates', the voted and the replaced
    texts, the known plate it matched."""
    return payload_texts(event.to_dict(include_crop=False))


def payload_texts(payload: Mapping[str, Any]) -> set[str]:
    """:func:`texts_of` an event's payload (as the consumers get it)."""
    texts = {str(payload.get("text")), *(str(c.get("text")) for c in payload.get("candidates", ()))}
    texts.update(str(payload[key]) for key in ("previous_text", "voted_text") if key in payload)
    match = payload.get("match")
    if isinstance(match, Mapping) and match.get("plate") is not None:
        texts.add(str(match["plate"]))
    return texts
