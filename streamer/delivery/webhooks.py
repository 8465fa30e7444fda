"""Webhook delivery: an ``EventSink`` that loses nothing.

:meth:`WebhookSink.publish` commits the event to the durable
:class:`~streamer.delivery.outbox.Outbox`
(a pending delivery per target) and only then wakes the delivery workers; it raises
when the commit fails, so an event is never dropped silently.

One worker task per target (``webhook-<target>``) takes the oldest pending event of
each camera from the outbox and POSTs it with aiohttp: a camera's events go one at a
time and in order, cameras in parallel up to ``max_concurrency``. Each target keeps
its own progress, so a target that is down holds up no other.

Per answer:

* 2xx: delivered;
* 408, 429, 5xx, a connection error or a timeout: retried after a capped exponential
  backoff with full jitter (``uniform(0, min(retry_max_delay_s, retry_initial_delay_s *
  2 ** (attempts - 1)))``), or after the answer's ``Retry-After`` (seconds or an HTTP
  date, cut to ``retry_after_max_s``), with no limit on the number of attempts;
* anything else (other 4xx, a 3xx: redirects are not followed): a dead letter with
  the reason ``HTTP 400: <first 200 characters of the body>``, kept until re-driven
  (``python -m streamer deadletters``, :meth:`WebhookSink.redrive`).

Requests are signed per the Standard Webhooks specification (``webhook-id`` = the
message id: the event id for a pass's first report, ``<event_id>.v<version>`` for a
correction, so a receiver deduplicates re-sent messages; ``webhook-timestamp``;
``webhook-signature`` = ``v1,<base64 HMAC-SHA256>``) with the target's ``whsec_``
secret, which appears in no log, error or metric. The payload is
``PlateEvent.to_dict()`` with the crop per target: ``crop_jpeg_base64``, ``crop_url``
or nothing. See docs/events.md.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import email.utils
import functools
import importlib.metadata
import json
import logging
import math
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import quote

import aiohttp
from standardwebhooks import Webhook

from streamer.config.schema import OutboxConfig, Settings, WebhookTargetConfig
from streamer.delivery.events import PlateEvent
from streamer.delivery.outbox import DeadLetter, Outbox, OutboxError, PendingDelivery
from streamer.ops.metrics import Metrics
from streamer.ops.redact import redact_text

LOG = logging.getLogger(__name__)

#: Seconds between two looks at the outbox when nothing wakes a worker (picks up
#: dead letters re-driven by the CLI, which runs in another process).
POLL_INTERVAL_S = 5.0
#: Seconds between two updates of the outbox depth / oldest-age gauges.
STATS_INTERVAL_S = 5.0
#: Seconds ``close()`` waits for POSTs in flight before cancelling them.
CLOSE_TIMEOUT_S = 5.0
#: Seconds a worker waits between tries while the outbox database is failing.
OUTBOX_ERROR_DELAY_S = 5.0
#: Characters of an error answer's body kept as the reason.
ERROR_BODY_CHARS = 200
_ERROR_BODY_BYTES = 4096


def _version() -> str:
    try:
        return importlib.metadata.version("lpr-streamer")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


USER_AGENT = f"lpr-streamer/{_version()}"


# --------------------------------------------------------------------------- policy


def backoff_delay(attempts: int, initial_s: float, max_s: float, rng: random.Random) -> float:
    """Full-jitter exponential backoff after ``attempts`` failed attempts (>= 1)."""
    ceiling = min(max_s, initial_s * 2.0 ** min(max(attempts - 1, 0), 62))
    return rng.uniform(0.0, ceiling)


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delay seconds or an HTTP date);
    None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def crop_url(public_base_url: str, event_id: str) -> str:
    """Where the service serves an event's crop (the web server comes in a later issue)."""
    return f"{public_base_url.rstrip('/')}/api/events/{quote(event_id, safe='')}/crop.jpg"


@dataclass(frozen=True)
class Outcome:
    """What one POST came to."""

    kind: Literal["delivered", "retry", "dead"]
    error: str | None = None
    #: The answer's Retry-After, in seconds, when it had one.
    retry_after_s: float | None = None


class _Target:
    """A target's worker state (the secret lives only inside ``signer``)."""

    def __init__(self, config: WebhookTargetConfig) -> None:
        self.config = config
        self.name = config.name
        self.signer = Webhook(config.secret.get_secret_value())
        self.wake = asyncio.Event()
        #: camera -> its POST in flight (one per camera: per-camera order).
        self.in_flight: dict[str, asyncio.Task[None]] = {}
        self.task: asyncio.Task[None] | None = None
        self.failing = False

    def __repr__(self) -> str:
        return f"_Target({self.name!r})"


# --------------------------------------------------------------------------- the sink


class WebhookSink:
    """The ``EventSink`` that POSTs every event to every webhook target, from the outbox.

    Make one with :func:`create_webhook_sink` or :meth:`open` (both start the workers);
    stop it with :meth:`close`.
    """

    name = "webhooks"

    def __init__(
        self,
        outbox: Outbox,
        targets: Sequence[WebhookTargetConfig],
        metrics: Metrics,
        *,
        retention_s: float,
        prune_interval_s: float,
        poll_interval_s: float = POLL_INTERVAL_S,
        close_timeout_s: float = CLOSE_TIMEOUT_S,
        outbox_error_delay_s: float = OUTBOX_ERROR_DELAY_S,
        rng: random.Random | None = None,
    ) -> None:
        """Use :meth:`open`; this does not start the workers."""
        names = [t.name for t in targets]
        if not targets or set(names) != set(outbox.targets):
            raise ValueError(f"targets {names} do not match the outbox's {list(outbox.targets)}")
        self.outbox = outbox
        self.metrics = metrics
        self.retention_s = retention_s
        self.prune_interval_s = prune_interval_s
        self.poll_interval_s = poll_interval_s
        self.close_timeout_s = close_timeout_s
        self.outbox_error_delay_s = outbox_error_delay_s
        self._rng = rng or random.Random()
        self._targets = {t.name: _Target(t) for t in targets}
        self._session: aiohttp.ClientSession | None = None
        self._housekeeping: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        outbox_config: OutboxConfig,
        targets: Sequence[WebhookTargetConfig],
        metrics: Metrics,
        **options: Any,
    ) -> WebhookSink:
        """Open the outbox and start a worker per target (``options``: see ``__init__``).

        Raises :class:`OutboxError` when the outbox cannot be opened.
        """
        outbox = await Outbox.open(outbox_config.path, [t.name for t in targets], metrics=metrics)
        try:
            sink = cls(
                outbox,
                targets,
                metrics,
                retention_s=outbox_config.retention_s,
                prune_interval_s=outbox_config.prune_interval_s,
                **options,
            )
            await sink._start()
        except BaseException:
            await outbox.close()
            raise
        return sink

    async def _start(self) -> None:
        for name, count in (await self.outbox.orphaned_targets()).items():
            LOG.warning(
                "outbox %s: %d undelivered event(s) for webhook target %r, which is not "
                "configured (or disabled): they wait until it is again",
                self.outbox.path,
                count,
                name,
            )
        limit = sum(t.config.max_concurrency for t in self._targets.values())
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit),
            headers={"user-agent": USER_AGENT},
        )
        for target in self._targets.values():
            target.task = asyncio.create_task(self._run(target), name=f"webhook-{target.name}")
            LOG.info(
                "webhook %s: delivering to %s (crop: %s, up to %d in flight)",
                target.name,
                target.config.redacted_url,
                target.config.crop,
                target.config.max_concurrency,
            )
        self._housekeeping = asyncio.create_task(
            self._run_housekeeping(), name="webhook-housekeeping"
        )

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(self._targets)

    @property
    def healthy(self) -> bool:
        """The outbox writes and every worker runs (for readiness)."""
        if not self.outbox.healthy or self._closing is not None:
            return False
        return all(t.task is not None and not t.task.done() for t in self._targets.values())

    # ------------------------------------------------------------------ EventSink

    async def publish(self, event: PlateEvent) -> None:
        """Commit ``event`` to the outbox (durable when this returns), then wake the
        workers. Raises :class:`OutboxError` when it cannot be stored."""
        if self._closing is not None:
            raise RuntimeError("the webhook sink is closed")
        await self.outbox.add(event)
        for target in self._targets.values():
            target.wake.set()

    async def close(self) -> None:
        """Stop the workers, give POSTs in flight ``close_timeout_s`` to finish (the rest
        stay pending and go after a restart), close the outbox. Idempotent."""
        if self._closing is None:
            self._closing = asyncio.create_task(self._close(), name="webhook-close")
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        loops = [t.task for t in self._targets.values() if t.task is not None]
        if self._housekeeping is not None:
            loops.append(self._housekeeping)
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        in_flight = [task for t in self._targets.values() for task in t.in_flight.values()]
        if in_flight:
            _, late = await asyncio.wait(in_flight, timeout=self.close_timeout_s)
            if late:
                LOG.warning(
                    "webhooks: %d POST(s) still in flight after %.0f s: cancelled, they stay "
                    "pending in the outbox",
                    len(late),
                    self.close_timeout_s,
                )
            for task in late:
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)
        with contextlib.suppress(OutboxError):
            await self.refresh_metrics()
        if self._session is not None:
            await self._session.close()
        await self.outbox.close()

    # ------------------------------------------------------------------ dead letters

    async def dead_letters(self, target: str | None = None) -> list[DeadLetter]:
        return await self.outbox.dead_letters(target)

    async def redrive(
        self, event_ids: Iterable[str] | None = None, target: str | None = None
    ) -> int:
        """Dead letters back to pending (None: all), delivered at once; returns the count."""
        count = await self.outbox.redrive(event_ids, target)
        for t in self._targets.values():
            t.wake.set()
        return count

    # ------------------------------------------------------------------ metrics

    async def refresh_metrics(self) -> None:
        """Set the outbox depth and oldest-age gauges of every target."""
        for name in self._targets:
            stats = await self.outbox.stats(name)
            self.metrics.outbox_depth.labels(name).set(stats.depth)
            self.metrics.outbox_oldest_age.labels(name).set(stats.oldest_age_s)

    async def _run_housekeeping(self) -> None:
        next_prune = time.monotonic()
        while True:
            with contextlib.suppress(OutboxError):  # logged and counted by the outbox
                await self.refresh_metrics()
            if time.monotonic() >= next_prune:
                next_prune = time.monotonic() + self.prune_interval_s
                with contextlib.suppress(OutboxError):
                    pruned = await self.outbox.prune(self.retention_s)
                    if pruned:
                        LOG.info("outbox: pruned %d delivered event(s)", pruned)
            await asyncio.sleep(max(0.0, min(STATS_INTERVAL_S, next_prune - time.monotonic())))

    # ------------------------------------------------------------------ workers

    async def _run(self, target: _Target) -> None:
        """A target's worker: keep up to max_concurrency cameras' heads in flight."""
        config = target.config
        while True:
            target.wake.clear()
            if not self.outbox.healthy:
                # The database fails: go slowly, so that a full disk does not turn into
                # a storm of POSTs whose success cannot be recorded.
                await asyncio.sleep(self.outbox_error_delay_s)
            timeout = self.poll_interval_s
            try:
                free = config.max_concurrency - len(target.in_flight)
                if free > 0:
                    batch = await self.outbox.next_batch(
                        target.name,
                        free,
                        exclude_cameras=set(target.in_flight),
                        with_crop=config.crop == "base64",
                    )
                    for item in batch:
                        self._launch(target, item)
                    due = await self.outbox.next_due(
                        target.name, exclude_cameras=set(target.in_flight)
                    )
                    if due is not None:
                        timeout = min(timeout, max(0.0, due - time.time()))
            except OutboxError:  # logged and counted by the outbox
                timeout = self.outbox_error_delay_s
            except Exception:
                LOG.exception("webhook %s: worker error", target.name)
                timeout = self.outbox_error_delay_s
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
            # cancel that lands as the wake-up fires, and close() would wait forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await target.wake.wait()

    def _launch(self, target: _Target, item: PendingDelivery) -> None:
        task = asyncio.create_task(
            self._deliver(target, item), name=f"webhook-{target.name}-{item.camera}"
        )
        target.in_flight[item.camera] = task
        task.add_done_callback(functools.partial(self._delivered, target, item.camera))

    @staticmethod
    def _delivered(target: _Target, camera: str, task: asyncio.Task[None]) -> None:
        if target.in_flight.get(camera) is task:
            del target.in_flight[camera]
        target.wake.set()

    async def _deliver(self, target: _Target, item: PendingDelivery) -> None:
        try:
            outcome = await self.post(target, item)
            await self._record(target, item, outcome)
        except OutboxError:
            pass  # logged and counted; the delivery stays pending and is sent again
        except Exception:
            LOG.exception("webhook %s: delivering event %s failed", target.name, item.event_id)

    def body(self, config: WebhookTargetConfig, item: PendingDelivery) -> str:
        """The JSON body for one target: the stored payload plus the crop as configured."""
        payload = dict(item.payload)
        if config.crop == "base64":
            if item.crop is None:
                raise ValueError("crop: base64 needs the crop (next_batch(with_crop=True))")
            payload["crop_jpeg_base64"] = base64.b64encode(item.crop).decode("ascii")
        elif config.crop == "url":
            assert config.public_base_url is not None  # checked by the config
            payload["crop_url"] = crop_url(config.public_base_url, item.event_id)
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))

    async def post(self, target: _Target, item: PendingDelivery) -> Outcome:
        """One signed POST of ``item`` to ``target``; never raises for network trouble."""
        assert self._session is not None
        config = target.config
        body = self.body(config, item)
        now = datetime.now(UTC)
        headers = {
            "webhook-id": item.event_id,
            "webhook-timestamp": str(math.floor(now.timestamp())),
            "webhook-signature": target.signer.sign(item.event_id, now, body),
            "content-type": "application/json",
        }
        try:
            async with self._session.post(
                config.url,
                data=body.encode("utf-8"),
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=config.timeout_s),
                allow_redirects=False,
            ) as response:
                status = response.status
                if 200 <= status < 300:
                    return Outcome("delivered")
                text = await _error_text(response)
                error = f"HTTP {status}: {text}" if text else f"HTTP {status}"
                if status in (408, 429) or status >= 500:
                    retry_after = retry_after_seconds(response.headers.get("Retry-After"))
                    return Outcome("retry", error, retry_after)
                return Outcome("dead", error)
        except TimeoutError:
            return Outcome("retry", f"timeout: no answer within {config.timeout_s:g} s")
        except aiohttp.ClientError as exc:
            detail = redact_text(str(exc)) or "(no detail)"
            return Outcome("retry", f"{type(exc).__name__}: {detail}")

    async def _record(self, target: _Target, item: PendingDelivery, outcome: Outcome) -> None:
        config = target.config
        name = target.name
        if outcome.kind == "delivered":
            self.metrics.webhook_deliveries.labels(name, "delivered").inc()
            await self.outbox.mark_delivered(item.event_id, name)
            if target.failing:
                target.failing = False
                LOG.info("webhook %s: delivering again", name)
            LOG.info("webhook %s: delivered event %s", name, item.event_id)
            return
        error = outcome.error or "unknown error"
        if outcome.kind == "dead":
            self.metrics.webhook_deliveries.labels(name, "dead_letter").inc()
            self.metrics.webhook_dead_letters.labels(name).inc()
            await self.outbox.mark_dead(item.event_id, name, error)
            LOG.warning(
                "webhook %s: event %s (camera %s) is a dead letter: %s (see "
                "`python -m streamer deadletters list`)",
                name,
                item.event_id,
                item.camera,
                error,
            )
            return
        attempts = item.attempts + 1
        if outcome.retry_after_s is not None:
            delay = min(outcome.retry_after_s, config.retry_after_max_s)
        else:
            delay = backoff_delay(
                attempts, config.retry_initial_delay_s, config.retry_max_delay_s, self._rng
            )
        self.metrics.webhook_deliveries.labels(name, "retry").inc()
        self.metrics.webhook_retries.labels(name).inc()
        await self.outbox.mark_retry(item.event_id, name, time.time() + delay, error)
        if not target.failing:
            target.failing = True
            LOG.warning("webhook %s: delivery failed (%s); retrying with backoff", name, error)
        LOG.debug(
            "webhook %s: event %s attempt %d failed (%s); next in %.1f s",
            name,
            item.event_id,
            attempts,
            error,
            delay,
        )


async def _error_text(response: aiohttp.ClientResponse) -> str:
    """The first characters of an error answer's body, on one line ("" if unreadable)."""
    try:
        raw = await response.content.read(_ERROR_BODY_BYTES)
    except (aiohttp.ClientError, TimeoutError):
        return ""
    text = " ".join(raw.decode("utf-8", errors="replace").split())
    return redact_text(text[:ERROR_BODY_CHARS])


async def create_webhook_sink(
    settings: Settings, metrics: Metrics, **options: Any
) -> WebhookSink | None:
    """The webhook sink of ``settings`` (started), or None when no target is enabled.

    Raises :class:`OutboxError` when the outbox cannot be opened (the service should
    not start: events would have nowhere durable to go).
    """
    targets = [t for t in settings.webhooks if t.enabled]
    if not targets:
        return None
    return await WebhookSink.open(settings.outbox, targets, metrics, **options)
