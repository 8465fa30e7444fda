"""Cameras over Triton endpoints: weighted rendezvous hashing, and an endpoint's share as it
fails and recovers (streamer/inference/balancing.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from streamer.inference.balancing import MAX_RELAPSES, EndpointShare, pick

CAMERAS = [f"cam-{i:04d}" for i in range(2000)]


def _assign(weights: dict[str, float]) -> dict[str, str | None]:
    return {camera: pick(camera, weights) for camera in CAMERAS}


@pytest.mark.parametrize(
    "weights", [{"a:1": 1.0, "b:1": 1.0}, {"a:1": 1.0, "b:1": 3.0}, {"a:1": 1, "b:1": 1, "c:1": 2}]
)
def test_cameras_are_shared_in_proportion_to_the_weights(weights: dict[str, float]) -> None:
    counts = Counter(_assign(weights).values())
    total = sum(weights.values())
    for endpoint, weight in weights.items():
        assert abs(counts[endpoint] / len(CAMERAS) - weight / total) < 0.04, counts


def test_an_endpoint_of_weight_zero_gets_nothing_and_none_without_any() -> None:
    assert set(_assign({"a:1": 1.0, "b:1": 0.0}).values()) == {"a:1"}
    assert pick("cam", {"a:1": 0.0}) is None and pick("cam", {}) is None


def test_a_failed_endpoint_moves_only_its_own_cameras() -> None:
    before = _assign({"a:1": 1, "b:1": 1, "c:1": 1})
    after = _assign({"a:1": 1, "b:1": 0, "c:1": 1})
    moved = [c for c in CAMERAS if before[c] != after[c]]
    assert moved and all(before[c] == "b:1" for c in moved)
    assert all(after[c] != "b:1" for c in CAMERAS)
    # ...and back at full weight, exactly those cameras return.
    assert _assign({"a:1": 1, "b:1": 1, "c:1": 1}) == before


def test_a_rising_weight_only_ever_pulls_cameras_towards_it() -> None:
    """While a recovered endpoint's share grows, cameras move to it one by one and none
    leaves it: no flapping."""
    on_b: set[str] = set()
    sizes = []
    for step in range(11):
        now = {c for c, e in _assign({"a:1": 1, "b:1": step / 10}).items() if e == "b:1"}
        assert on_b <= now
        on_b = now
        sizes.append(len(now))
    assert sizes[0] == 0 and abs(sizes[-1] - len(CAMERAS) / 2) < 0.04 * len(CAMERAS)
    assert sizes == sorted(sizes) and len(set(sizes)) > 5  # gradual, not all at once


def test_an_endpoint_there_from_the_start_serves_in_full_once_healthy() -> None:
    share = EndpointShare(recover_after_s=5, rebalance_s=20, ramp=False)
    assert share.share(0) == 0 and share.state(0) == "down"
    assert share.observe(True, 1.0) and share.share(1.0) == 1.0
    assert not share.observe(True, 2.0)  # no change


def test_back_from_a_failure_it_waits_then_ramps_in() -> None:
    share = EndpointShare(recover_after_s=5, rebalance_s=20, ramp=False)
    share.observe(True, 0.0)
    assert share.observe(False, 100.0) and share.share(100.0) == 0 and share.failures == 1
    share.observe(True, 110.0)
    assert share.share(114.9) == 0 and share.state(114.9) == "recovering"
    assert share.share(125.0) == pytest.approx(0.5)
    assert share.share(135.0) == 1.0 and share.state(135.0) == "serving"


def test_relapses_while_recovering_double_the_wait_up_to_a_cap() -> None:
    share = EndpointShare(recover_after_s=5, rebalance_s=20, ramp=False)
    share.observe(True, 0.0)
    share.observe(False, 10.0)
    now = 10.0
    holds = []
    for _ in range(MAX_RELAPSES + 2):
        share.observe(True, now)
        holds.append(share.hold_s)
        now += 1.0
        share.observe(False, now)  # fails again before it got its cameras back
        now += 1.0
    assert holds == [5, 10, 20, 40, 40]
    # Once it has served in full again, the next failure is a new one: the wait is 5 s.
    share.observe(True, now)
    now += share.hold_s + share.rebalance_s + 1
    assert share.share(now) == 1.0
    share.observe(False, now)
    share.observe(True, now + 1)
    assert share.hold_s == 5
