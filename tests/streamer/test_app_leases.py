"""Camera leases (streamer/pipeline/leases.py) on a real PostgreSQL: replicas rolled from
``--shard I/2`` to ``I/3`` one at a time, sampled every 50 ms throughout, never run a camera
twice; a camera whose old owner still runs it waits and starts once that replica lets it go;
at the end every camera runs exactly once, on its owner, and at most half of them moved."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streamer.foundation.shards import Shard, owner
from streamer.inference.embedded.server import EmbeddedTriton
from tests.postgres_server import PostgresServer
from tests.streamer.web.running_service import CLIP, RunningService, running_service
from tests.webhook_receiver import new_secret

CAMERAS = ["gate", "yard", "exit", "lane-1", "lane-2", "dock", "ramp", "north", "south"]


def _config(triton_url: str, dsn: str) -> str:
    lines = [f"  - {{name: {n}, url: '{CLIP}', sample_fps: 1}}" for n in CAMERAS]
    return (
        "cameras:\n" + "\n".join(lines) + "\n"
        f"triton: {{url: '{triton_url}'}}\n"
        "events: {stdout: false}\nmetrics: {enabled: false}\nweb: {port: 0}\n"
        f"storage: {{backend: postgresql, dsn: '{dsn}'}}\n"
    )


def _running(replica: RunningService) -> set[str]:
    for _ in range(10):
        with contextlib.suppress(RuntimeError):  # changed size during iteration: again
            return set(replica.service.cameras.running)
    return set()


class Watch:
    """Samples the running cameras of every live replica; any camera in two is recorded."""

    def __init__(self) -> None:
        self.replicas: dict[str, RunningService] = {}
        self.overlaps: list[tuple[str, list[str]]] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            seen: dict[str, list[str]] = {}
            for label, replica in list(self.replicas.items()):
                for camera in _running(replica):
                    seen.setdefault(camera, []).append(label)
            self.overlaps += [(c, r) for c, r in seen.items() if len(r) > 1]
            self.samples += 1


def _until(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@contextlib.contextmanager
def _replica(folder: Path, text: str, shard: Shard, watch: Watch) -> Iterator[RunningService]:
    folder.mkdir(parents=True, exist_ok=True)
    with running_service(folder / "site.yaml", text, new_secret(), shard=shard) as replica:
        watch.replicas[str(shard)] = replica
        try:
            yield replica
        finally:
            del watch.replicas[str(shard)]


def test_two_to_three_replicas_never_run_a_camera_twice(
    triton_server: EmbeddedTriton, postgres: PostgresServer, tmp_path: Path
) -> None:
    """As a StatefulSet scales from 2 to 3: the new replica starts first, then the old two
    restart with the new N one at a time."""
    text = _config(triton_server.grpc_url, postgres.database())
    two = {c: owner(c, 2) for c in CAMERAS}
    three = {c: owner(c, 3) for c in CAMERAS}
    moved = [c for c in CAMERAS if two[c] != three[c]]
    print(f"2 -> 3 replicas moves {len(moved)} of {len(CAMERAS)} cameras: {moved}")
    assert moved and len(moved) <= len(CAMERAS) / 2
    assert all(three[c] == 2 for c in moved)  # rendezvous: only to the new replica
    from_0 = {c for c in moved if two[c] == 0}
    assert from_0 and set(moved) - from_0, "the names give no camera from each old replica"

    with Watch() as watch:
        stacks = [contextlib.ExitStack() for _ in range(3)]
        try:
            old = [
                stacks[i].enter_context(_replica(tmp_path / f"r{i}", text, Shard(i, 2), watch))
                for i in range(2)
            ]
            _until(lambda: _running(old[0]) | _running(old[1]) == set(CAMERAS), 60, "2 replicas")
            new2 = stacks[2].enter_context(_replica(tmp_path / "r2", text, Shard(2, 3), watch))
            _until(lambda: set(new2.service.lease_gate.waiting) == set(moved), 30, "waiting")
            time.sleep(3)  # longer than a lease check: still waiting, still on the old owners
            assert set(new2.service.lease_gate.waiting) == set(moved) and not _running(new2)
            assert _running(old[0]) >= from_0

            stacks[0].close()  # replica 0 restarts as 0/3: it lets its moved cameras go
            stacks[0] = contextlib.ExitStack()
            new = [stacks[0].enter_context(_replica(tmp_path / "r0", text, Shard(0, 3), watch))]
            _until(lambda: _running(new2) == from_0, 30, "replica 0's moved cameras on 2")
            stacks[1].close()
            stacks[1] = contextlib.ExitStack()
            new.append(stacks[1].enter_context(_replica(tmp_path / "r1", text, Shard(1, 3), watch)))
            new.append(new2)
            _until(
                lambda: all(
                    _running(r) == {c for c in CAMERAS if three[c] == i} for i, r in enumerate(new)
                ),
                60,
                "every camera on its owner of three",
            )
            assert all(not r.service.lease_gate.waiting for r in new)
            assert new2.service.readiness()[1]["leases"] == {"waiting": [], "problem": None}
        finally:
            for stack in reversed(stacks):
                stack.close()
    assert watch.samples > 100
    assert not watch.overlaps, watch.overlaps[:10]


def test_a_lost_lease_database_stops_every_camera_until_it_is_back(
    triton_server: EmbeddedTriton, tmp_path: Path
) -> None:
    """PostgreSQL stopped under a replica: every lease is gone with the session, so the
    replica stops its cameras (another may take them) and says why; back, it runs them
    again."""
    with PostgresServer(tmp_path / "pg") as server:
        text = _config(triton_server.grpc_url, server.database())
        mine = {c for c in CAMERAS if owner(c, 2) == 0}
        with Watch() as watch, _replica(tmp_path / "r0", text, Shard(0, 2), watch) as replica:
            _until(lambda: _running(replica) == mine, 60, "its cameras")
            server.stop()
            stopped_at = time.monotonic()
            _until(lambda: not _running(replica), 30, "its cameras stopped")
            print(f"cameras stopped {time.monotonic() - stopped_at:.1f} s after PostgreSQL")
            gate = replica.service.lease_gate
            assert set(gate.waiting) == mine and gate.problem is not None
            details = replica.service.readiness()[1]
            assert details["leases"]["problem"] == gate.problem
            assert f"127.0.0.1:{server.port}" in gate.problem  # names the database
            server.resume()
            _until(lambda: _running(replica) == mine, 60, "its cameras back")
            assert replica.service.lease_gate.problem is None
