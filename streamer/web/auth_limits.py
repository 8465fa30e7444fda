"""How often one client may get the token wrong: a sliding window per client address.

Every wrong token (a Bearer header, ``?token=``, the login form) is a failure of the client
that sent it. A client with ``burst`` failures within ``window_s`` is answered 429 (a
problem document, ``Retry-After``: the seconds until its oldest failure leaves the window)
on every request that needs the token, the right token included, until then: guessing stops
being worth it, and a client that knows the token waits at most ``window_s``. Other clients
are not slowed.

A client is its TCP peer address (``request.remote``). Behind a reverse proxy every client
has the proxy's address, so they share one window; the proxy should limit too
(docs/production.md, Security: Behind a reverse proxy). Forwarded headers are not trusted for it: a
client would only have to change the header to get a fresh window.

One WARNING per client and burst: when it is first refused, with the address and how long;
its later refusals within that burst are not logged (a loop of guesses cannot fill the log).
The table is bounded (``MAX_CLIENTS``; the client with the oldest failure is forgotten
first). Hand-written: aiohttp has no limiter, and the libraries that do (aiohttp-ratelimiter,
limits) count requests, not failures.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable

from aiohttp import web

from streamer.web.errors import json_error

log = logging.getLogger(__name__)

#: Clients whose failures are remembered at once.
MAX_CLIENTS = 10_000


class FailureLimiter:
    """Wrong-token failures per client within a sliding window (see the module docstring)."""

    def __init__(
        self,
        burst: int,
        window_s: float,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        if burst < 1 or window_s <= 0:
            raise ValueError(f"burst must be >= 1 and window_s > 0, got {burst}, {window_s}")
        self.burst = burst
        self.window_s = window_s
        self._clock = clock
        self.max_clients = max_clients
        self._failures: dict[str, deque[float]] = {}
        self._warned: dict[str, float] = {}  # client -> the end of the burst it was warned of
        #: Requests refused 429 so far (for the metric and the tests).
        self.refused = 0

    def retry_after(self, client: str) -> float:
        """Seconds until ``client`` may try again (0: now)."""
        failures = self._failures.get(client)
        if failures is None:
            return 0.0
        now = self._clock()
        while failures and failures[0] <= now - self.window_s:
            failures.popleft()
        if not failures:
            del self._failures[client]
            self._warned.pop(client, None)
            return 0.0
        if len(failures) < self.burst:
            return 0.0
        return failures[0] + self.window_s - now

    def failed(self, client: str) -> None:
        """``client`` got the token wrong."""
        now = self._clock()
        failures = self._failures.pop(client, None)
        if failures is None:
            failures = deque(maxlen=self.burst)
            while len(self._failures) >= self.max_clients:  # oldest first: dicts keep order
                forgotten = next(iter(self._failures))
                del self._failures[forgotten]
                self._warned.pop(forgotten, None)
        failures.append(now)
        self._failures[client] = failures  # re-inserted: the latest failure is the newest

    def refuse(self, client: str) -> None:
        """Raise 429 when ``client`` has used up its failures (see the module docstring)."""
        wait = self.retry_after(client)
        if wait <= 0.0:
            return
        self.refused += 1
        until = self._clock() + wait
        if self._warned.get(client, -math.inf) < self._clock():
            self._warned[client] = until
            log.warning(
                "web: %s got the token wrong %d times within %gs: refused for %.0fs",
                client,
                self.burst,
                self.window_s,
                math.ceil(wait),
            )
        raise json_error(
            web.HTTPTooManyRequests,
            f"too many wrong tokens from this address: try again in {math.ceil(wait)}s",
            **{"Retry-After": str(math.ceil(wait))},
        )


def client_of(request: web.Request) -> str:
    """The client a failure counts against: its TCP peer address."""
    return request.remote or "unknown"
