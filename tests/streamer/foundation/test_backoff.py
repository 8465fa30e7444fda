"""streamer.foundation.backoff: the one exponential backoff, capped and jittered."""

from __future__ import annotations

import random

from streamer.foundation.backoff import backoff_ceiling, backoff_delay


def test_the_ceiling_doubles_from_the_initial_delay_up_to_the_maximum() -> None:
    ceilings = [backoff_ceiling(n, 0.5, 30.0) for n in range(0, 10)]
    assert ceilings == [0.5, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_a_failure_that_lasts_for_ever_never_overflows() -> None:
    """A camera down for days fails a million times; 2.0 ** 1024 would raise OverflowError."""
    assert backoff_ceiling(1_000_000, 0.5, 30.0) == 30.0
    assert backoff_delay(1_000_000, 0.5, 30.0, random.Random(1)) <= 30.0


def test_the_delay_is_spread_over_the_whole_range_below_the_ceiling() -> None:
    rng = random.Random(7)
    delays = [backoff_delay(4, 1.0, 60.0, rng) for _ in range(500)]
    assert all(0.0 <= d <= 8.0 for d in delays)
    assert min(delays) < 1.0 and max(delays) > 7.0  # full jitter, not a fixed step
