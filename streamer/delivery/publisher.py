"""Events leave the inference path: a bounded queue to one publisher task.

A camera pipeline hands its decided passes to :meth:`EventPublisher.submit`,
which never waits: the passes go into a bounded queue (``EVENT_QUEUE_SIZE``) and
the pipeline goes back to its frames. One task, the ``events`` part of the
supervisor, takes them in order, builds each event (its JPEG crop in a worker
thread), counts and logs it, and gives it to every sink in turn, each within
``SINK_TIMEOUT_S``. A sink that raises or times out is marked failing (``/readyz``
says which, ``lpr_sink_errors_total`` counts it) and the event itself is logged
at ERROR as JSON so that it can be replayed; the other sinks still get it. The
webhook sink's part is the outbox commit, the moment an event is safe; its
deliveries run on their own workers.

When the queue is full (sinks far behind for a long time) a new pass is not
queued: it is logged at ERROR with its text and counted in
``lpr_events_dropped_total``. Never silently.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamer.delivery.events import EventSink, PlateEvent, build_event
from streamer.ops.metrics import Metrics
from streamer.tracking.plate_pass import PlatePass

LOG = logging.getLogger(__name__)

#: Passes waiting for the publisher; beyond it a new pass is dropped (logged, counted).
EVENT_QUEUE_SIZE = 1000
#: The longest one sink may take to accept one event.
SINK_TIMEOUT_S = 10.0


@dataclass
class EventLog:
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

    def forget(self, *, plate: str | None = None, event_id: str | None = None) -> int:
        """Drop every message of the passes that hold ``plate`` (any text of theirs) or of
        the pass ``event_id`` (an erasure); how many passes."""
        ids = {
            e.event_id
            for e in self.events
            if e.event_id == event_id or (plate is not None and plate in texts_of(e))
        }
        self.events = [e for e in self.events if e.event_id not in ids]
        return len(ids)

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
    """:func:`texts_of` an event's payload (as sinks got it)."""
    texts = {str(payload.get("text")), *(str(c.get("text")) for c in payload.get("candidates", ()))}
    texts.update(str(payload[key]) for key in ("previous_text", "voted_text") if key in payload)
    match = payload.get("match")
    if isinstance(match, Mapping) and match.get("plate") is not None:
        texts.add(str(match["plate"]))
    return texts


class EventPublisher:
    """Takes decided passes from the pipelines and gives their events to every sink."""

    def __init__(
        self,
        sinks: Sequence[EventSink],
        metrics: Metrics,
        *,
        jpeg_quality: int,
        queue_size: int = EVENT_QUEUE_SIZE,
        sink_timeout_s: float = SINK_TIMEOUT_S,
    ) -> None:
        self.metrics = metrics
        self.sinks = list(sinks)
        self.jpeg_quality = jpeg_quality
        #: The width of each event's vehicle picture (None: none is made; the history's).
        self.frame_max_width: int | None = None
        self.sink_timeout_s = sink_timeout_s
        self.recent = EventLog()
        self.emitted = 0  # passes reported (version 1)
        self.updates = 0  # corrections (plate.updated)
        self.by_camera: Counter[str] = Counter()
        self.dropped = 0
        #: Sinks whose last event failed: name -> why.
        self.failing: dict[str, str] = {}
        self._queue: asyncio.Queue[PlatePass] = asyncio.Queue(queue_size)
        self._publishing = asyncio.Lock()  # held while an event goes to the sinks

    @property
    def sinks(self) -> list[EventSink]:
        """Where events go, in order."""
        return self._sinks

    @sinks.setter
    def sinks(self, sinks: Sequence[EventSink]) -> None:
        self._sinks = list(sinks)
        self._count_sinks()

    def _count_sinks(self) -> None:
        """``lpr_sink_errors_total`` at 0 for each sink."""
        self.metrics.known(self.metrics.sink_errors, *((sink.name,) for sink in self._sinks))

    @property
    def healthy(self) -> bool:
        """Every sink took the last event given to it."""
        return not self.failing

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    def submit(self, passes: Sequence[PlatePass]) -> None:
        """Queue ``passes`` for the sinks; never waits (a full queue drops, logged)."""
        for plate_pass in passes:
            try:
                self._queue.put_nowait(plate_pass)
            except asyncio.QueueFull:
                self.dropped += 1
                if self.metrics.counts(plate_pass.camera):
                    self.metrics.events_dropped.labels(plate_pass.camera).inc()
                LOG.error(
                    "event queue full (%d waiting: the sinks are far behind): pass %s v%d, "
                    "%s on %s, not published",
                    self._queue.qsize(),
                    plate_pass.event_id,
                    plate_pass.version,
                    plate_pass.text,
                    plate_pass.camera,
                )

    async def run(self) -> None:
        """Publish queued passes in order, until cancelled (the supervisor's ``events``)."""
        while True:
            plate_pass = await self._queue.get()
            try:
                async with self._publishing:
                    await self._publish(plate_pass)
            finally:
                self._queue.task_done()

    async def replace_sink(
        self,
        old: EventSink | None,
        open_new: Callable[[], Awaitable[EventSink | None]],
    ) -> EventSink | None:
        """Close ``old`` and put the sink ``open_new()`` gives in its place (a config
        reload); no event goes to a sink meanwhile (passes keep queueing), so none is given
        to the old sink after it closed or missed by the new one. None: no sink (added at
        the end when ``old`` was None)."""
        async with self._publishing:
            if old is not None:
                await old.close()
            new = await open_new()
            at = self.sinks.index(old) if old is not None else len(self.sinks)
            self.sinks[at : at + (old is not None)] = [new] if new is not None else []
            self._count_sinks()
            if old is not None:
                self.failing.pop(old.name, None)
            return new

    async def drain(self, timeout_s: float) -> bool:
        """Wait until every queued pass is published; False if ``timeout_s`` passed first
        (each pass left is then logged at ERROR)."""
        try:
            await asyncio.wait_for(self._queue.join(), timeout_s)
        except TimeoutError:
            while not self._queue.empty():
                left = self._queue.get_nowait()
                self._queue.task_done()
                LOG.error(
                    "shutdown: pass %s v%d, %s on %s, not published (the sinks are behind)",
                    left.event_id,
                    left.version,
                    left.text,
                    left.camera,
                )
            return False
        return True

    async def _publish(self, plate_pass: PlatePass) -> None:
        event = await build_event(plate_pass, self.jpeg_quality, self.frame_max_width)
        after_s = time.monotonic() - event.first_seen_monotonic
        metrics, counted = self.metrics, self.metrics.counts(event.camera)
        if event.version == 1:
            self.emitted += 1
            self.by_camera[event.camera] += 1
            if counted:
                metrics.events.labels(event.camera).inc()
                metrics.frame_to_event_latency.labels(event.camera).observe(after_s)
            what = event.text
        else:
            self.updates += 1
            if counted:
                metrics.event_updates.labels(event.camera).inc()
            what = f"v{event.version}, {event.previous_text} corrected to {event.text}"
        LOG.info(
            "event %s: %s on %s (track %d, %d reads, %d pieces of evidence, %s, "
            "%.1f s after first seen)",
            event.event_id,
            what,
            event.camera,
            event.track_id,
            event.reads,
            event.evidence,
            event.reason,
            after_s,
        )
        self.recent.add(event)
        for sink in self.sinks:
            await self._give(sink, event)

    async def _give(self, sink: EventSink, event: PlateEvent) -> None:
        try:
            await asyncio.wait_for(sink.publish(event), self.sink_timeout_s)
        except Exception as exc:
            why = (
                f"no answer within {self.sink_timeout_s:g} s"
                if isinstance(exc, TimeoutError)
                else f"{type(exc).__name__}: {exc}"
            )
            self.metrics.sink_errors.labels(sink.name).inc()
            first = sink.name not in self.failing
            self.failing[sink.name] = why[:300]
            # Loud, never silent: the traceback once per run of failures, and every event
            # that a sink missed as JSON, so that it can be replayed.
            LOG.error(
                "sink %s could not take event %s (%s): %s",
                sink.name,
                event.message_id,
                why,
                json.dumps(event.to_dict(include_crop=False)),
                exc_info=exc if first and not isinstance(exc, TimeoutError) else None,
            )
            return
        if self.failing.pop(sink.name, None) is not None:
            LOG.warning("sink %s takes events again", sink.name)
