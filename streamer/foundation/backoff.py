"""The one exponential backoff: after ``attempts`` failures in a row, wait up to
``min(max_s, initial_s * 2 ** (attempts - 1))``, with full jitter (uniform from 0 to that
ceiling) where many clients retry at once. Used by the camera reconnects, the Triton stream,
the supervisor's restarts and every delivery's retries.
"""

from __future__ import annotations

import random

#: The exponent stops here: ``2.0 ** 1024`` overflows (a camera down for a day), and
#: ``2 ** 62`` times any initial delay is past any maximum.
_MAX_EXPONENT = 62


def backoff_ceiling(attempts: int, initial_s: float, max_s: float) -> float:
    """The longest wait after ``attempts`` failures in a row (>= 1; 0 reads as 1)."""
    return float(min(max_s, initial_s * 2.0 ** min(max(attempts - 1, 0), _MAX_EXPONENT)))


def backoff_delay(
    attempts: int, initial_s: float, max_s: float, rng: random.Random | None = None
) -> float:
    """A full-jitter wait after ``attempts`` failures in a row: uniform in [0, ceiling]."""
    return (rng or random).uniform(0.0, backoff_ceiling(attempts, initial_s, max_s))
