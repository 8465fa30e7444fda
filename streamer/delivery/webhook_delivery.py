"""One signed webhook POST, and what its answer comes to.

:class:`WebhookPoster` holds one target's config and its signer (the ``whsec_`` secret
lives only there, and appears in no log, error or metric). :meth:`WebhookPoster.post`
sends one pending delivery and classifies the answer as an :class:`Outcome`:

* 2xx: delivered;
* 408, 429, 5xx, a connection error or a timeout: retry (with the answer's
  ``Retry-After`` when it has one; when, is :mod:`streamer.delivery.retry`'s call);
* 401, 403, 404 (a receiver that rejects us, often for a while: a secret or a route being
  changed): retry with the backoff while the target has rejected for less than
  ``retry_rejected_for_s`` (since the first such answer after its last 2xx, kept in memory),
  then dead; 0: dead at once. :attr:`WebhookPoster.problem` says so once it is dead-lettering;
* anything else (other 4xx, a 3xx: redirects are not followed): dead, with the reason
  ``HTTP 400: <first 200 characters of the body>``.

Requests are signed per the Standard Webhooks specification (``webhook-id`` = the
message id: the event id for a pass's first report, ``<event_id>.v<version>`` for a
correction, so a receiver deduplicates re-sent messages; ``webhook-timestamp``;
``webhook-signature`` = ``v1,<base64 HMAC-SHA256>``, one per secret, space-separated: the
``secret`` first, then each of ``previous_secrets``, so that a receiver holding either accepts
the request while the secret is rotated). The event is
``PlateEvent.to_dict()`` with the crop per target: ``crop_jpeg_base64``, or ``crop_url``
(and ``frame_url``) as signed links that expire (streamer/domain/picture_links.py), or
nothing. The body is the event in the Standard Webhooks envelope, ``{"type", "timestamp",
"data"}`` (:func:`envelope`), or, with ``payload: bare``, the event itself. See
docs/events.md.
"""

from __future__ import annotations

import base64
import json
import math
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
from standardwebhooks import Webhook

from streamer import __version__
from streamer.config import WebhookTargetConfig
from streamer.delivery.deliverer import Outcome, OutcomeKind
from streamer.delivery.outbox_sql import PendingDelivery
from streamer.delivery.retry import retry_after_seconds, retry_delay
from streamer.domain.picture_links import PictureLinks, picture_urls
from streamer.foundation.metrics import Metrics
from streamer.foundation.redact import redact_text
from streamer.foundation.supervisor import Supervisor

#: Characters of an error answer's body kept as the reason.
ERROR_BODY_CHARS = 200
_ERROR_BODY_BYTES = 4096


USER_AGENT = f"lpr-streamer/{__version__}"


def envelope(event: dict[str, Any], decided_at: float) -> dict[str, Any]:
    """The Standard Webhooks envelope of ``event``: its ``type`` (``plate`` or
    ``plate.updated``), ``timestamp``, when the event occurred (``decided_at``: the Unix time
    this version was decided and stored in the outbox; the same on every attempt), in UTC,
    ISO 8601 as the event's own times, and the event itself as ``data``."""
    moment = datetime.fromtimestamp(decided_at, tz=UTC).isoformat(timespec="milliseconds")
    return {"type": event["type"], "timestamp": moment, "data": event}


#: Answers of a receiver that rejects the requests (retried for ``retry_rejected_for_s``).
REJECTED = frozenset({401, 403, 404})


def is_retryable(status: int) -> bool:
    """Whether an HTTP answer that is not a 2xx is worth another attempt, however long the
    receiver has answered so (see :data:`REJECTED` for the answers retried for a while)."""
    return status in (408, 429) or status >= 500


class WebhookPoster:
    """One target's signed POSTs (see the module docstring): the target's
    :class:`~streamer.delivery.deliverer.Deliverer`."""

    ready = True  # a receiver that is down is found out per POST, and retried
    parts: tuple[str, ...] = ()

    def __init__(
        self,
        config: WebhookTargetConfig,
        metrics: Metrics | None = None,
        links: PictureLinks | None = None,
        *,
        frames: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.name = config.name
        self.part = f"webhook:{config.name}"
        self.max_concurrency = config.max_concurrency
        self.with_crop = config.crop == "base64"
        self.takes_withheld = config.withheld  # plate.withheld events too
        self.metrics = metrics if metrics is not None else Metrics()
        self.links = links
        self.frames = frames
        self._signers = [
            Webhook(secret.get_secret_value())
            for secret in (config.secret, *config.previous_secrets)
        ]
        self._session: aiohttp.ClientSession | None = None
        self._clock = clock
        #: When (``clock()``) the target began rejecting (its first 401, 403 or 404 since its
        #: last 2xx), and its latest such answer; None: not rejecting.
        self._rejecting_since: float | None = None
        self._rejected_status = 0

    def __repr__(self) -> str:
        return f"WebhookPoster({self.config.name!r})"

    def describe(self) -> str:
        return f"webhook {self.name}"

    @property
    def problem(self) -> str | None:
        """While the target rejects the requests (401, 403, 404 since its last 2xx) for
        longer than ``retry_rejected_for_s``, so that its events become dead letters: since
        when (a readiness problem); else None. Within the window, a receiver being deployed
        or a secret being rotated, it is only retried."""
        since = self._rejecting_since
        if since is None:
            return None
        window, rejected_for = self.config.retry_rejected_for_s, self._clock() - since
        if rejected_for < window:
            return None
        return (
            f"webhook {self.name}: rejected with HTTP {self._rejected_status} for "
            f"{rejected_for:.0f} s: its events become dead letters (retry_rejected_for_s: "
            f"{window:g} s)"
        )

    async def start(self, supervisor: Supervisor, wake: Callable[[], None]) -> None:
        """Open the HTTP session of this target (its own connection pool)."""
        del supervisor, wake  # nothing long-lived: each POST stands alone
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.max_concurrency),
                headers={"user-agent": USER_AGENT},
            )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def deliver(self, item: PendingDelivery) -> Outcome:
        if self._session is None:
            raise RuntimeError(f"{self!r} is not started")
        return await self.post(self._session, item)

    def retry_delay(self, attempts: int, outcome: Outcome, rng: random.Random) -> float:
        return retry_delay(self.config, attempts, outcome.retry_after_s, rng)

    def count(self, kind: OutcomeKind) -> None:
        metrics, name = self.metrics, self.name
        metrics.webhook_deliveries.labels(name, "dead_letter" if kind == "dead" else kind).inc()
        if kind == "retry":
            metrics.webhook_retries.labels(name).inc()
        elif kind == "dead":
            metrics.webhook_dead_letters.labels(name).inc()

    def body(self, item: PendingDelivery) -> str:
        """The JSON body for this target: the stored event plus the crop as configured, in
        the envelope or bare (``payload``)."""
        config = self.config
        event = dict(item.payload)
        if config.crop == "base64":
            if item.crop is None:
                raise ValueError("crop: base64 needs the crop (next_batch(with_crop=True))")
            event["crop_jpeg_base64"] = base64.b64encode(item.crop).decode("ascii")
        elif config.crop == "url":
            assert config.public_base_url is not None  # checked by the config
            event.update(
                picture_urls(config.public_base_url, item.event_id, self.links, frame=self.frames)
            )
        body = event if config.payload == "bare" else envelope(event, item.created_at)
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"))

    def signature(self, msg_id: str, now: datetime, body: str) -> str:
        """The ``webhook-signature`` header: ``v1,<signature>`` with ``secret``, then with each
        of ``previous_secrets``, space-separated (Standard Webhooks)."""
        return " ".join(signer.sign(msg_id, now, body) for signer in self._signers)

    async def post(self, session: aiohttp.ClientSession, item: PendingDelivery) -> Outcome:
        """One signed POST of ``item``; never raises for network trouble."""
        config = self.config
        body = self.body(item)
        now = datetime.now(UTC)
        headers = {
            "webhook-id": item.event_id,
            "webhook-timestamp": str(math.floor(now.timestamp())),
            "webhook-signature": self.signature(item.event_id, now, body),
            "content-type": "application/json",
        }
        try:
            async with session.post(
                config.url,
                data=body.encode("utf-8"),
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=config.timeout_s),
                allow_redirects=False,
            ) as response:
                status = response.status
                if 200 <= status < 300:
                    self._rejecting_since = None
                    return Outcome("delivered")
                text = await _error_text(response)
                error = f"HTTP {status}: {text}" if text else f"HTTP {status}"
                if is_retryable(status):
                    retry_after = retry_after_seconds(response.headers.get("Retry-After"))
                    return Outcome("retry", error, retry_after)
                if status in REJECTED:
                    return self._rejected(status, error)
                return Outcome("dead", error)
        except TimeoutError:
            return Outcome("retry", f"timeout: no answer within {config.timeout_s:g} s")
        except aiohttp.ClientError as exc:
            detail = redact_text(str(exc)) or "(no detail)"
            return Outcome("retry", f"{type(exc).__name__}: {detail}")

    def _rejected(self, status: int, error: str) -> Outcome:
        """A 401, 403 or 404: retried while the target has rejected for less than
        ``retry_rejected_for_s``, then dead (at once with 0, the reason as for any 4xx)."""
        now = self._clock()
        if self._rejecting_since is None:
            self._rejecting_since = now
        self._rejected_status = status
        window = self.config.retry_rejected_for_s
        if now - self._rejecting_since < window:
            return Outcome("retry", error)
        if window == 0:
            return Outcome("dead", error)
        reason = f"{error} (rejected for longer than retry_rejected_for_s, {window:g} s)"
        return Outcome("dead", reason)


async def _error_text(response: aiohttp.ClientResponse) -> str:
    """The first characters of an error answer's body, on one line ("" if unreadable)."""
    try:
        raw = await response.content.read(_ERROR_BODY_BYTES)
    except (aiohttp.ClientError, TimeoutError):
        return ""
    text = " ".join(raw.decode("utf-8", errors="replace").split())
    return redact_text(text[:ERROR_BODY_CHARS])
