"""Decided passes become events, committed to the event log before anything else sees them.

A camera pipeline hands its decided passes (and corrections) to
:meth:`EventPublisher.publish`: each becomes an event (its crop and vehicle picture
encoded in a worker thread, after which the frame's pixels are let go) and goes into a
queue bounded in bytes (``outbox.queue_max_mb``). One task, the ``events`` part of the
supervisor, takes them in order and commits each to the durable event log (the outbox, in
its own transaction: :meth:`Consumers.append`); only then is it counted, logged, shown
(the live view's recent events, in-process observers) and read by the consumers (the
history, stdout, the file, webhooks, MQTT: streamer/delivery/consumers.py).

A commit that fails (a full disk, an I/O error, a lock held too long) is tried again with
a capped backoff, the event kept in the queue meanwhile: never dropped. While it fails
the service is not ready (``/readyz``: ``events``), once per episode it is logged at ERROR.
When the queue is full a pipeline's :meth:`~EventPublisher.publish` waits for room: the
camera's decisions wait (its frame queue drops old frames, as when inference is behind),
counted in ``lpr_event_queue_waits_total`` and logged once per episode. The queue's depth and
bytes are ``lpr_event_queue_depth`` and ``lpr_event_queue_bytes``.

A withheld pass (``plate.withheld``: decided, but short of ``events.min_confidence`` or
``events.min_reads``) goes the same way, to the consumers that take it (the history; a
webhook target with ``withheld: true``), and is logged at INFO; it is not counted, shown or
given to the observers as a plate event.

A pass of an erased plate (streamer/store/erasure.py) is not published: its id is in the
log's erasure records, which the commit checks, or in :attr:`EventPublisher.erased` before
that.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from streamer.delivery.event_queue import EventQueue, event_bytes
from streamer.delivery.events import EventSink, LeaseStamp, PlateEvent, build_event, utc_iso
from streamer.delivery.outbox import OutboxError
from streamer.delivery.recent_events import RecentEvents, texts_of
from streamer.domain.plate_pass import PlatePass
from streamer.foundation.backoff import backoff_delay
from streamer.foundation.metrics import Metrics

LOG = logging.getLogger(__name__)

#: The longest one in-process observer may take to accept one event.
OBSERVER_TIMEOUT_S = 10.0
#: A commit that failed is tried again after a backoff from this...
COMMIT_RETRY_INITIAL_S = 0.5
#: ...up to this.
COMMIT_RETRY_MAX_S = 10.0
#: What a withheld pass's reason means, as its log line says it.
WITHHELD_WHY = {
    "low_confidence": "confidence under events.min_confidence",
    "few_reads": "read exactly fewer than events.min_reads times",
}
#: The names readiness reports the event log and its queue under.
LOG_PART = "event log"
QUEUE_PART = "event queue"


class EventLog(Protocol):
    """Where events are committed first (streamer/delivery/consumers.py)."""

    async def append(self, event: PlateEvent) -> bool:
        """Durable when this returns; False when not added (there already, or its pass
        erased); raises :class:`OutboxError` when it cannot be stored."""
        ...


class Fence(Protocol):
    """Whether a camera's decisions may be published now, and under which lease
    (streamer/pipeline/lease_gate.py)."""

    def may_publish(self, camera: str) -> bool: ...

    def token(self, camera: str) -> int | None:
        """The fencing token of ``camera``'s lease held here (None: no leases taken)."""
        ...


class EventPublisher:
    """Takes decided passes from the pipelines and commits their events to the log."""

    def __init__(
        self,
        metrics: Metrics,
        *,
        jpeg_quality: int,
        queue_max_bytes: int,
        observer_timeout_s: float = OBSERVER_TIMEOUT_S,
        rng: random.Random | None = None,
    ) -> None:
        self.metrics = metrics
        self.jpeg_quality = jpeg_quality
        #: The width of each event's vehicle picture (None: none is made; the history's).
        self.frame_max_width: int | None = None
        #: Where events are committed (None: no consumer is configured; nothing durable).
        self.log: EventLog | None = None
        self._observers: list[EventSink] = []
        self.observer_timeout_s = observer_timeout_s
        self.recent = RecentEvents()
        #: Passes erased (by id) not to publish: open ones an erasure found, until the log
        #: has the record of them.
        self.erased: set[str] = set()
        #: Whether a camera's decisions may be published now (its lease is valid here:
        #: streamer/pipeline/lease_gate.py), and the lease's token each event carries;
        #: None: always, without a token.
        self.fence: Fence | None = None
        self.fenced = 0  # decisions refused: their camera's lease had run out
        self.emitted = 0  # passes reported (version 1)
        self.updates = 0  # corrections (plate.updated)
        self.by_camera: Counter[str] = Counter()
        self.dropped = 0  # never committed: left at shutdown
        #: What fails now (the event log, an observer): name -> why (readiness).
        self.failing: dict[str, str] = {}
        self.queue = EventQueue(queue_max_bytes)
        self._rng = rng or random.Random()
        self._blocked = 0  # pipelines waiting for room now
        self._full_since: float | None = None  # when the queue was first found full
        self._encoding: set[asyncio.Task[None]] = set()  # flushed passes being encoded
        self._commit_failed_at: float | None = None

    @property
    def observers(self) -> list[EventSink]:
        """In-process observers given each committed event (replay's collector)."""
        return self._observers

    @observers.setter
    def observers(self, observers: Sequence[EventSink]) -> None:
        self._observers = list(observers)
        self.metrics.known(self.metrics.sink_errors, *((o.name,) for o in self._observers))

    @property
    def healthy(self) -> bool:
        """Commits succeed, the queue has room and every observer took its last event."""
        return not self.failing

    @property
    def waiting(self) -> int:
        """Events waiting for the log."""
        return len(self.queue)

    # ------------------------------------------------------------------ in

    async def publish(self, passes: Sequence[PlatePass]) -> None:
        """Make ``passes`` events and queue them for the log, in order; waits while the
        queue is full (the camera's decisions wait, none is dropped)."""
        for plate_pass in passes:
            event = await self._event(plate_pass)
            if event is None:
                continue
            if self.queue.fits(event_bytes(event)):
                await self.queue.put(event)
            else:
                self._queue_full(event.camera)
                self._blocked += 1
                try:
                    await self.queue.put(event)
                finally:
                    self._blocked -= 1
            self._gauges()

    def submit(self, passes: Sequence[PlatePass]) -> None:
        """:meth:`publish` without waiting (the passes flushed from a cancelled pipeline);
        they go in whatever the bound. :meth:`drain` waits for them."""
        if not passes:
            return

        async def encode() -> None:
            for plate_pass in passes:
                event = await self._event(plate_pass)
                if event is not None:
                    self.queue.put_nowait(event)
            self._gauges()

        task = asyncio.get_running_loop().create_task(encode(), name="encode-flushed")
        self._encoding.add(task)
        task.add_done_callback(self._encoding.discard)

    async def _event(self, plate_pass: PlatePass) -> PlateEvent | None:
        """The event of ``plate_pass`` (None for an erased pass, or one decided once its
        camera's lease had run out here); its frame is let go."""
        lease = None
        if self.fence is not None:
            # The time first, then the check: an event stamped while its lease was valid
            # here (a freeze after the check only delays it), else refused.
            decided_at = time.time()
            if not self.fence.may_publish(plate_pass.camera):
                return self._refuse(plate_pass)
            token = self.fence.token(plate_pass.camera)
            lease = LeaseStamp(token, utc_iso(decided_at)) if token is not None else None
        if plate_pass.event_id in self.erased:
            LOG.info(
                "pass %s v%d of an erased plate: not published",
                plate_pass.event_id,
                plate_pass.version,
            )
            return None
        return await build_event(plate_pass, self.jpeg_quality, self.frame_max_width, lease)

    def _refuse(self, plate_pass: PlatePass) -> None:
        """``plate_pass`` was decided after its camera's lease ran out here: not published."""
        self.fenced += 1
        LOG.warning(
            "pass %s v%d on %s: decided after its camera's lease ran out here (another "
            "replica may run it): not published",
            plate_pass.event_id,
            plate_pass.version,
            plate_pass.camera,
        )

    def _queue_full(self, camera: str) -> None:
        """``camera``'s pipeline waits for room: counted; the episode logged once."""
        if self.metrics.counts(camera):
            self.metrics.event_queue_waits.labels(camera).inc()
        why = (
            f"full: {len(self.queue)} events ({self.queue.bytes / 2**20:.1f} MiB) wait for the "
            "event log; the cameras' decisions wait"
        )
        self.failing[QUEUE_PART] = why
        if self._full_since is None:
            self._full_since = time.monotonic()
            LOG.error("event queue %s (camera %s first)", why, camera)

    def _room_again(self) -> None:
        """No pipeline waits for room any more: the episode of a full queue ends."""
        if self._full_since is not None and not self._blocked:
            LOG.warning(
                "event queue: room again after %.1f s; the cameras' decisions go on",
                time.monotonic() - self._full_since,
            )
            self._full_since = None
            self.failing.pop(QUEUE_PART, None)

    def _gauges(self) -> None:
        self.metrics.event_queue_depth.set(len(self.queue))
        self.metrics.event_queue_bytes.set(self.queue.bytes)

    # ------------------------------------------------------------------ the log

    async def run(self) -> None:
        """Commit queued events in order, until cancelled (the supervisor's ``events``).
        An event leaves the queue once committed and announced: :meth:`drain` waits for it."""
        while True:
            event = await self.queue.head()
            if await self._commit(event) and event.event_id not in self.erased:
                await self._announce(event)  # (not if erased while it was committed)
            self.queue.pop(event)
            self._gauges()
            self._room_again()

    async def _commit(self, event: PlateEvent) -> bool:
        """Commit ``event`` to the log, tried again until it is; False when it is not to be
        published (an erased pass, or one the log has already)."""
        if event.event_id in self.erased:
            LOG.info("event %s of an erased plate: not published", event.message_id)
            return False
        log = self.log
        if log is None:
            return True
        attempts = 0
        while True:
            try:
                added = await log.append(event)
            except OutboxError as exc:
                attempts += 1
                self._commit_failing(exc)
                await asyncio.sleep(
                    backoff_delay(attempts, COMMIT_RETRY_INITIAL_S, COMMIT_RETRY_MAX_S, self._rng)
                )
                continue
            break
        if self._commit_failed_at is not None:
            LOG.warning(
                "event log: commits succeed again after %.1f s; %d event(s) waited",
                time.monotonic() - self._commit_failed_at,
                len(self.queue),
            )
            self._commit_failed_at = None
            self.failing.pop(LOG_PART, None)
        if not added:
            LOG.info(
                "event %s: already in the log, or its pass erased: not again", event.message_id
            )
        return added

    def _commit_failing(self, exc: Exception) -> None:
        why = f"commits fail ({exc}); {len(self.queue)} event(s) wait in memory, retrying"
        self.failing[LOG_PART] = why[:400]
        if self._commit_failed_at is None:
            self._commit_failed_at = time.monotonic()
            LOG.error("event log: %s", why)

    async def _announce(self, event: PlateEvent) -> None:
        """A committed event: counted, logged, shown, given to the observers. A withheld
        pass is only logged: it is no plate event (the history keeps it, apart)."""
        if event.withheld is not None:
            LOG.info(
                "withheld %s: %s on %s (track %d, %d reads, confidence %.2f, %s): not reported",
                event.event_id,
                event.text,
                event.camera,
                event.track_id,
                event.reads,
                event.confidence,
                WITHHELD_WHY.get(event.withheld, event.withheld),
            )
            return
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
        for observer in self.observers:
            await self._give(observer, event)

    async def _give(self, observer: EventSink, event: PlateEvent) -> None:
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel
            # that lands as the observer returns, and the service's stop would wait forever.
            async with asyncio.timeout(self.observer_timeout_s):
                await observer.publish(event)
        except Exception as exc:
            why = (
                f"no answer within {self.observer_timeout_s:g} s"
                if isinstance(exc, TimeoutError)
                else f"{type(exc).__name__}: {exc}"
            )
            self.metrics.sink_errors.labels(observer.name).inc()
            first = observer.name not in self.failing
            self.failing[observer.name] = why[:300]
            LOG.error(
                "observer %s could not take event %s (%s); the event is in the log",
                observer.name,
                event.message_id,
                why,
                exc_info=exc if first and not isinstance(exc, TimeoutError) else None,
            )
            return
        if self.failing.pop(observer.name, None) is not None:
            LOG.warning("observer %s takes events again", observer.name)

    # ------------------------------------------------------------------ erasure, stop

    def erase(self, ids: set[str], plate: str | None) -> set[str]:
        """Passes erased: not published from now on, and the queued events of ``plate`` (any
        text of theirs) or of ``ids`` taken out; the ids of every pass so found."""
        gone = self.queue.remove(
            lambda e: e.event_id not in ids and (plate is None or plate not in texts_of(e))
        )
        found = ids | {e.event_id for e in gone}
        self.erased |= found
        self._gauges()
        return found

    async def drain(self, timeout_s: float) -> bool:
        """Wait until every queued event is committed (and announced); False if
        ``timeout_s`` passed first (each event left is then logged at ERROR as JSON)."""
        try:
            async with asyncio.timeout(timeout_s):
                while self._encoding:
                    await asyncio.gather(*self._encoding, return_exceptions=True)
                await self.queue.empty()
        except TimeoutError:
            for event in list(self.queue):
                self.dropped += 1
                if self.metrics.counts(event.camera):
                    self.metrics.events_dropped.labels(event.camera).inc()
                LOG.error(
                    "shutdown: event %s of %s on %s never reached the event log: %s",
                    event.message_id,
                    event.text,
                    event.camera,
                    json.dumps(event.to_dict(include_crop=False), ensure_ascii=False),
                )
            return False
        return True
