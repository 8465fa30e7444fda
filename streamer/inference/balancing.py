"""Which Triton endpoint serves which camera: weighted rendezvous hashing, and each endpoint's
share as it fails and recovers.

A camera goes to the endpoint with the highest score ``-weight / ln(u)``, ``u`` a hash of
camera and endpoint in (0, 1): each endpoint gets cameras in proportion to its weight, and a
change of one endpoint's weight moves only cameras to or from that endpoint (weighted
rendezvous hashing; no library does it for arbitrary weights, and it is a dozen lines).

An endpoint's weight is its measured capacity times its *share*. The share drops to 0 the
moment the endpoint fails (its cameras move at once). Back, it first has to stay healthy for
``recover_after_s``, then its share grows linearly to 1 over ``rebalance_s``, so its
cameras come back a few at a time; a relapse in that time doubles the wait (up to 8x), so
an endpoint that fails again and again does not pull cameras back and forth.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Mapping

#: The wait before a relapsing endpoint gets cameras again doubles up to this many times.
MAX_RELAPSES = 3


@functools.lru_cache(maxsize=65536)  # assignments are recomputed 5 times a second
def _unit_hash(camera: str, endpoint: str) -> float:
    digest = hashlib.blake2b(f"{camera}\0{endpoint}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2**64  # in (0, 1), never 0 or 1


def pick(camera: str, weights: Mapping[str, float]) -> str | None:
    """The endpoint that serves ``camera``: the highest weighted rendezvous score among the
    endpoints of positive weight; None when there is none."""
    best, best_score = None, -math.inf
    for endpoint, weight in weights.items():
        if weight <= 0:
            continue
        score = -weight / math.log(_unit_hash(camera, endpoint))
        if score > best_score or (score == best_score and best is not None and endpoint < best):
            best, best_score = endpoint, score
    return best


class EndpointShare:
    """How much of its fair part of the cameras one endpoint should serve now (0..1)."""

    def __init__(self, recover_after_s: float, rebalance_s: float, *, ramp: bool) -> None:
        self.recover_after_s = recover_after_s
        self.rebalance_s = rebalance_s
        self.healthy = False
        #: Failures during a recovery (each doubles the next wait), at most MAX_RELAPSES.
        self.relapses = 0
        self.failures = 0
        self._healthy_since: float | None = None
        # An endpoint there from the start serves in full once healthy; one that failed or
        # appeared later (DNS) ramps in.
        self._ramp = ramp

    def observe(self, ok: bool, now: float) -> bool:
        """Record a health verdict; True when it changes the endpoint's health."""
        if ok == self.healthy:
            return False
        if ok:
            self.healthy = True
            self._healthy_since = now
            return True
        if self._ramp and self.share(now) < 1.0 and self._healthy_since is not None:
            self.relapses = min(self.relapses + 1, MAX_RELAPSES)  # failed again while recovering
        elif not self._ramp or self.share(now) >= 1.0:
            self.relapses = 0  # it had served in full: a new failure, not a relapse
        self.healthy = False
        self._healthy_since = None
        self._ramp = True
        self.failures += 1
        return True

    @property
    def hold_s(self) -> float:
        """How long it must stay healthy before it gets cameras again."""
        return float(self.recover_after_s * 2**self.relapses)

    def share(self, now: float) -> float:
        if not self.healthy or self._healthy_since is None:
            return 0.0
        if not self._ramp:
            return 1.0
        into = now - self._healthy_since - self.hold_s
        if into < 0:
            return 0.0
        if self.rebalance_s <= 0:
            return 1.0
        return min(1.0, into / self.rebalance_s)

    def state(self, now: float) -> str:
        """``down``, ``recovering`` (healthy, share below 1) or ``serving``."""
        if not self.healthy:
            return "down"
        return "serving" if self.share(now) >= 1.0 else "recovering"
