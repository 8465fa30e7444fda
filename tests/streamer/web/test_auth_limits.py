"""The wrong-token window of one client, on a clock the test moves."""

from __future__ import annotations

import pytest
from aiohttp import web

from streamer.web.auth_limits import FailureLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_client_waits_until_its_oldest_failure_leaves_the_window() -> None:
    clock = Clock()
    limiter = FailureLimiter(burst=3, window_s=60.0, clock=clock)
    for dt in (0.0, 10.0, 20.0):  # failures at 1000, 1010, 1020
        clock.now += dt - (clock.now - 1000.0)
        limiter.refuse("a")  # not yet over: no exception
        limiter.failed("a")
    assert limiter.retry_after("a") == pytest.approx(40.0)  # 1000 + 60 - 1020
    with pytest.raises(web.HTTPTooManyRequests) as refused:
        limiter.refuse("a")
    assert refused.value.headers["Retry-After"] == "40"
    assert limiter.retry_after("b") == 0.0  # others are not slowed
    clock.now = 1060.0  # the first failure leaves the window: one more try
    assert limiter.retry_after("a") == 0.0
    limiter.failed("a")
    assert limiter.retry_after("a") == pytest.approx(10.0)  # 1010 + 60 - 1060
    clock.now = 1200.0  # all of them old: forgotten
    assert limiter.retry_after("a") == 0.0
    assert limiter.refused == 1


def test_the_table_of_clients_is_bounded() -> None:
    clock = Clock()
    limiter = FailureLimiter(burst=1, window_s=60.0, clock=clock, max_clients=3)
    for client in ("a", "b", "c", "d"):
        limiter.failed(client)
    assert limiter.retry_after("a") == 0.0  # the oldest was forgotten
    assert all(limiter.retry_after(c) > 0 for c in ("b", "c", "d"))


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        FailureLimiter(burst=0, window_s=60.0)
    with pytest.raises(ValueError):
        FailureLimiter(burst=1, window_s=0.0)
