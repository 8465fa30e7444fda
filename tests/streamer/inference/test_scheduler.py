"""The adaptive window and the fair scheduler, on their own (pure asyncio, no Triton)."""

from __future__ import annotations

import asyncio
import collections
import random
from collections.abc import Callable

import pytest

from streamer.inference.scheduler import AdaptiveWindow, FairScheduler, Permit


def _window(**kwargs: float) -> AdaptiveWindow:
    params: dict[str, float] = {"initial": 2, "minimum": 1, "maximum": 16, "tolerance": 2.0}
    params.update(kwargs)
    return AdaptiveWindow(**params)  # type: ignore[arg-type]


def _simulate(
    window: AdaptiveWindow,
    latency_of: Callable[[int], float],
    answers: int,
    start: float = 0.0,
    seed: int = 7,
) -> list[int]:
    """A server kept busy by the window: each answer takes ``latency_of(limit)`` (+-20 %)."""
    rng = random.Random(seed)
    now, limits = start, []
    for _ in range(answers):
        latency = latency_of(window.limit) * rng.uniform(0.8, 1.2)
        now += latency / window.limit  # the window full: limit answers per latency
        window.on_answer(latency, in_flight=window.limit, now=now)
        limits.append(window.limit)
    return limits


def test_window_settles_at_the_servers_that_run_in_parallel() -> None:
    """Two workers of 0.25 s (a CPU detector as two single-thread instances): a third frame
    in flight only waits, so the window comes back to two and probes rarely."""
    window = _window(initial=2, minimum=1, maximum=64)
    limits = _simulate(window, lambda w: 0.25 * max(1.0, w / 2), 6000)
    settled = collections.Counter(limits[-3000:])
    assert settled[2] >= 0.95 * 3000, settled
    assert max(settled) <= 3, settled


def test_window_climbs_while_batching_pays() -> None:
    """A GPU-like server: a batch of w takes 20 ms x (1 + w / 16), so throughput grows with
    the window up to about 16 and more."""
    window = _window(initial=2, minimum=1, maximum=64, tolerance=4.0)
    limits = _simulate(window, lambda w: 0.02 * (1.0 + w / 16), 20000)
    assert min(limits[-2000:]) >= 8, collections.Counter(limits[-2000:])


def test_window_does_not_grow_when_it_is_not_the_bound() -> None:
    window = _window(initial=4)
    for i in range(500):
        window.on_answer(0.1, in_flight=1, now=i * 0.1)
    assert window.limit == 4


def test_window_shrinks_on_queueing_and_stays_within_bounds() -> None:
    window = _window(initial=12, minimum=3)
    now = 0.0
    for _ in range(50):  # the no-load reference
        now += 0.1
        window.on_answer(0.1, in_flight=1, now=now)
    for _ in range(40):  # queueing: five times the no-load latency
        now += 0.5
        window.on_answer(0.5, in_flight=window.limit, now=now)
    assert window.limit == 3  # never below the minimum
    # A server with room for any number: more in flight buys throughput in proportion.
    limits = _simulate(window, lambda w: 0.1, 20000, start=now)
    assert max(limits) == 16  # climbs back, never above the maximum


def test_window_decreases_at_most_once_per_round_trip() -> None:
    window = _window(initial=10, minimum=1)
    window.on_answer(1.0, in_flight=1, now=0.0)
    window.on_overload(now=10.0)
    once = window.limit
    for i in range(5):  # the same crowded window of answers: one signal
        window.on_overload(now=10.0 + i * 0.1)
    assert once == 8 and window.limit == once
    window.on_overload(now=11.5)
    assert window.limit < once


def test_window_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="minimum <= maximum"):
        AdaptiveWindow(initial=1, minimum=4, maximum=2, tolerance=2)
    with pytest.raises(ValueError, match="tolerance"):
        AdaptiveWindow(initial=1, minimum=1, maximum=2, tolerance=0.5)


def _fixed(limit: int, per_camera: int) -> FairScheduler:
    window = AdaptiveWindow(initial=limit, minimum=limit, maximum=limit, tolerance=2)
    return FairScheduler(window, max_per_camera=per_camera)


async def _serve(scheduler: FairScheduler, cameras: dict[str, int], grants: int) -> list[str]:
    """Each camera always has a frame waiting; answers come one at a time in grant order."""
    order: list[str] = []
    held: collections.deque[Permit] = collections.deque()
    stop = asyncio.Event()

    async def camera(name: str) -> None:
        while not stop.is_set():
            permit = await scheduler.acquire(name)
            order.append(name)
            held.append(permit)

    tasks = [asyncio.create_task(camera(name)) for name in cameras for _ in range(cameras[name])]
    while len(order) < grants:
        await asyncio.sleep(0)
        if held and scheduler.waiting:
            held.popleft().release(0.01)
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return order[:grants]


async def test_every_camera_gets_its_turn() -> None:
    scheduler = _fixed(limit=2, per_camera=2)
    order = await _serve(scheduler, {"a": 1, "b": 1, "c": 1, "d": 1}, 400)
    counts = collections.Counter(order)
    assert set(counts) == {"a", "b", "c", "d"}
    assert max(counts.values()) - min(counts.values()) <= 2, counts


async def test_weights_share_the_window_in_proportion() -> None:
    scheduler = _fixed(limit=1, per_camera=1)
    scheduler.set_weight("gate", 2.0)
    order = await _serve(scheduler, {"gate": 1, "yard": 1}, 300)
    counts = collections.Counter(order)
    assert 1.8 <= counts["gate"] / counts["yard"] <= 2.2, counts


async def test_the_window_and_the_camera_cap_bound_what_is_held() -> None:
    scheduler = _fixed(limit=3, per_camera=2)
    permits = [await scheduler.acquire("a"), await scheduler.acquire("a")]
    third = asyncio.create_task(scheduler.acquire("a"))  # over a's cap: waits
    other = await asyncio.wait_for(scheduler.acquire("b"), 1)
    await asyncio.sleep(0.01)
    assert not third.done() and scheduler.in_flight == 3 and scheduler.held("a") == 2
    late = asyncio.create_task(scheduler.acquire("c"))  # window full: waits
    await asyncio.sleep(0.01)
    assert not late.done()
    other.release(0.1)  # frees a window slot, a is still capped: c goes
    await asyncio.wait_for(late, 1)
    assert not third.done()
    permits[0].release(0.1)
    permits[0].release(0.1)  # idempotent: counted once
    await asyncio.wait_for(third, 1)
    assert scheduler.in_flight == 3 and scheduler.held("a") == 2


async def test_a_cancelled_waiter_gives_its_turn_away() -> None:
    scheduler = _fixed(limit=1, per_camera=1)
    first = await scheduler.acquire("a")
    waiting = asyncio.create_task(scheduler.acquire("b"))
    behind = asyncio.create_task(scheduler.acquire("c"))
    await asyncio.sleep(0.01)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    first.release()
    permit = await asyncio.wait_for(behind, 1)
    assert permit.camera == "c" and scheduler.in_flight == 1 and scheduler.waiting == 0


async def test_an_idle_camera_joins_at_the_current_turn() -> None:
    """A camera that was away gets no credit for it: it does not starve the others."""
    scheduler = _fixed(limit=1, per_camera=1)
    await _serve(scheduler, {"a": 1, "b": 1}, 200)  # a and b have been served for a while
    order = await _serve(scheduler, {"a": 1, "b": 1, "new": 1}, 30)
    counts = collections.Counter(order)
    assert counts["new"] <= 12, counts
