"""Cameras shared out over N streamer replicas: which replica runs which camera.

Every replica reads the same config and runs only the cameras its :class:`Shard` holds:
those that rendezvous (highest random weight) hashing gives its index. Each camera's
weight for each index is a hash of both; the camera goes to the index of the highest
weight. Every replica computes the same map from the camera names alone, with no
coordination, and changing N from ``n`` to ``n + 1`` moves only the cameras whose new
highest weight is the new index: about ``1/(n + 1)`` of them (the fewest possible).

The shard comes from ``--shard I/N`` (or ``LPR_SHARD``); ``--shard auto/N`` takes the index
from the host name's trailing ordinal, as a Kubernetes StatefulSet names its pods
(``lpr-streamer-2`` -> 2). Without one, a service is ``0/1``: it runs every camera.

Written here rather than taken from a library: the whole of it is one hash per (camera,
index) pair, and the map must be byte-for-byte the same in every replica and version
(blake2b of ``"<camera>\\0<index>"``, a fixed choice documented in docs/production.md).
"""

from __future__ import annotations

import hashlib
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass

#: The most replicas a fleet may have.
MAX_SHARDS = 1024
_SHARD = re.compile(r"^\s*(\d+|auto)\s*/\s*(\d+)\s*$")
_ORDINAL = re.compile(r"-(\d+)$")


def weight(camera: str, index: int) -> int:
    """The rendezvous weight of ``camera`` for replica ``index``."""
    digest = hashlib.blake2b(f"{camera}\0{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(camera: str, count: int) -> int:
    """The index, of ``count`` replicas, that runs ``camera``."""
    return max(range(count), key=lambda index: weight(camera, index))


def ordinal_of(hostname: str) -> int:
    """The trailing ordinal of a StatefulSet pod's name (``lpr-streamer-2`` -> 2)."""
    match = _ORDINAL.search(hostname.split(".")[0])
    if match is None:
        raise ValueError(
            f"host name {hostname!r} does not end in -<number> (a StatefulSet pod's name): "
            "give the index, as --shard I/N"
        )
    return int(match.group(1))


@dataclass(frozen=True)
class Shard:
    """Replica ``index`` of ``count``."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_SHARDS:
            raise ValueError(f"the number of replicas must be 1..{MAX_SHARDS}, got {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(
                f"the replica index must be 0..{self.count - 1} for {self.count} replicas, "
                f"got {self.index}"
            )

    @classmethod
    def parse(cls, text: str, hostname: str | None = None) -> Shard:
        """``"I/N"``, or ``"auto/N"`` (the index from ``hostname``, default this host's)."""
        match = _SHARD.match(text)
        if match is None:
            raise ValueError(f"a shard is I/N (e.g. 0/2) or auto/N, got {text!r}")
        index, count = match.groups()
        if index == "auto":
            return cls(ordinal_of(hostname or socket.gethostname()), int(count))
        return cls(int(index), int(count))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def sharded(self) -> bool:
        return self.count > 1

    def holds(self, camera: str) -> bool:
        return self.count == 1 or owner(camera, self.count) == self.index

    def map(self, cameras: Iterable[str]) -> dict[str, int]:
        """camera -> the index that runs it, for every camera in ``cameras``."""
        return {camera: owner(camera, self.count) for camera in cameras}
