"""Rendezvous sharding of cameras over replicas: every replica computes the same map,
changing the number of replicas moves few cameras, and a shard is given as I/N or taken
from a StatefulSet pod's name."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest

from streamer.foundation.shards import Shard, owner

CAMERAS = [f"cam-{i:03d}" for i in range(600)]


def test_every_camera_has_exactly_one_replica_and_the_load_is_even() -> None:
    shards = [Shard(i, 3) for i in range(3)]
    for camera in CAMERAS:
        assert sum(s.holds(camera) for s in shards) == 1
    load = Counter(owner(camera, 3) for camera in CAMERAS)
    assert set(load) == {0, 1, 2} and min(load.values()) > 600 / 3 * 0.8
    assert Shard(0, 1).holds("anything") and not Shard(0, 1).sharded


@pytest.mark.parametrize(("before", "after"), [(1, 2), (2, 3), (3, 4), (4, 3), (8, 9)])
def test_changing_the_number_of_replicas_moves_few_cameras(before: int, after: int) -> None:
    moved = sum(owner(c, before) != owner(c, after) for c in CAMERAS) / len(CAMERAS)
    ideal = abs(after - before) / max(after, before)  # the fewest a change can move
    assert moved <= ideal + 0.06, f"{before}->{after}: {moved:.0%} moved, ideal {ideal:.0%}"
    assert moved <= 0.5
    # Growing, a camera only ever moves to a new replica, never between the old ones.
    if after > before:
        assert all(owner(c, after) in (owner(c, before), *range(before, after)) for c in CAMERAS)


def test_the_map_follows_the_documented_formula() -> None:
    """Replicas of different versions share one fleet: the owner is the index with the
    highest blake2b-64 (big-endian) of ``"<camera>\\0<index>"``, computed here on its own."""

    def documented(camera: str, count: int) -> int:
        def weight(index: int) -> int:
            digest = hashlib.blake2b(f"{camera}\0{index}".encode(), digest_size=8).digest()
            return int.from_bytes(digest, "big")

        return max(range(count), key=weight)

    for camera in [*CAMERAS[:100], "gate", "yard", "exit-lane"]:
        for count in (2, 3, 7):
            assert owner(camera, count) == documented(camera, count)
    assert Shard(1, 2).map(["gate", "yard"]) == {"gate": owner("gate", 2), "yard": owner("yard", 2)}


def test_a_shard_is_parsed_or_taken_from_the_pod_name() -> None:
    assert Shard.parse("1/3") == Shard(1, 3) and str(Shard.parse(" 0 / 2 ")) == "0/2"
    assert Shard.parse("auto/4", hostname="lpr-streamer-3") == Shard(3, 4)
    assert Shard.parse("auto/4", hostname="lpr-streamer-2.lpr.default.svc") == Shard(2, 4)
    for text, words in [
        ("2/2", r"must be 0\.\.1"),
        ("0/0", r"must be 1\.\.1024"),
        ("a/2", "I/N"),
        ("1", "I/N"),
    ]:
        with pytest.raises(ValueError, match=words):
            Shard.parse(text)
    with pytest.raises(ValueError, match="does not end in -<number>"):
        Shard.parse("auto/2", hostname="laptop")
    with pytest.raises(ValueError, match=r"must be 0\.\.3"):
        Shard.parse("auto/4", hostname="lpr-streamer-7")
