"""When a webhook delivery that failed is tried again: the retry policy of one target.

After a retryable answer (see :mod:`streamer.delivery.webhook_delivery`) the next attempt
waits the answer's ``Retry-After`` (seconds or an HTTP date), cut to the target's
``retry_after_max_s``; without one, a capped exponential backoff with full jitter:
``uniform(0, min(retry_max_delay_s, retry_initial_delay_s * 2 ** (attempts - 1)))``.
There is no limit on the number of attempts: an event waits in the outbox until the
receiver takes it.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from datetime import UTC

from streamer.config import WebhookTargetConfig
from streamer.foundation.backoff import backoff_delay


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


def retry_delay(
    config: WebhookTargetConfig,
    attempts: int,
    retry_after_s: float | None,
    rng: random.Random,
) -> float:
    """Seconds until the next attempt after ``attempts`` failed ones (>= 1), given the
    answer's ``Retry-After`` in seconds (None: it had none)."""
    if retry_after_s is not None:
        return min(retry_after_s, config.retry_after_max_s)
    return backoff_delay(attempts, config.retry_initial_delay_s, config.retry_max_delay_s, rng)
