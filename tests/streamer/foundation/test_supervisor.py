import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from converters import assets
from streamer.app import Service
from streamer.config import load_config
from streamer.domain.frames import FrameResult
from streamer.foundation.supervisor import Supervisor
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.ops.server import OpsServer
from tests.log_records import traceback_of


async def test_a_crashed_part_is_logged_with_its_traceback_and_runs_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs = 0
    settled = asyncio.Event()

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs <= 2:
            raise OSError(f"disk full ({runs})")
        settled.set()
        await asyncio.Event().wait()  # runs until stopped

    supervisor = Supervisor(backoff_s=0.01)
    with caplog.at_level(logging.ERROR, logger="streamer.foundation.supervisor"):
        supervisor.start("events-file", flaky)
        await asyncio.wait_for(settled.wait(), 5)
    part = supervisor.parts["events-file"]
    assert (part.state, part.restarts, part.last_error) == ("running", 2, "OSError: disk full (2)")
    crashes = [r for r in caplog.records if "events-file crashed" in r.getMessage()]
    assert len(crashes) == 2  # once per crash
    assert all("OSError: disk full" in traceback_of(r) for r in crashes)
    await supervisor.stop()
    assert part.state == "stopped" and supervisor.task("events-file") is None


async def test_a_part_that_returns_has_ended_and_is_not_run_again() -> None:
    runs = 0

    async def finite() -> None:
        nonlocal runs
        runs += 1

    supervisor = Supervisor(backoff_s=0.01)
    task = supervisor.start("camera-file", finite)
    await asyncio.wait_for(task, 5)
    assert runs == 1 and supervisor.parts["camera-file"].to_dict() == {
        "state": "ended",
        "restarts": 0,
        "last_error": None,
    }
    await supervisor.stop()
    assert supervisor.parts["camera-file"].state == "ended"


async def test_stop_cancels_a_part_waiting_to_restart() -> None:
    crashed = asyncio.Event()

    async def broken() -> None:
        crashed.set()
        raise RuntimeError("no")

    supervisor = Supervisor(backoff_s=60)
    task = supervisor.start("broken", broken)
    await asyncio.wait_for(crashed.wait(), 5)
    for _ in range(5):  # the supervisor takes the exception and starts its wait
        await asyncio.sleep(0)
    assert supervisor.parts["broken"].state == "restarting"
    await asyncio.wait_for(supervisor.stop("broken"), 5)
    assert task.cancelled() and supervisor.parts["broken"].state == "stopped"


async def test_a_part_that_keeps_crashing_is_a_crash_loop_and_a_stable_one_is_not() -> None:
    async def broken() -> None:
        raise RuntimeError("no")

    async def flaky_but_stable() -> None:
        await asyncio.sleep(0.05)  # each run lasts longer than stable_s
        raise RuntimeError("now and then")

    supervisor = Supervisor(backoff_s=0.001, stable_s=0.02)
    supervisor.start("broken", broken)
    supervisor.start("flaky", flaky_but_stable)
    try:
        await asyncio.wait_for(_until(lambda: supervisor.parts["broken"].crashes >= 5), 10)
        await asyncio.wait_for(_until(lambda: supervisor.parts["flaky"].restarts >= 5), 10)
        assert supervisor.crash_looping() == ["broken"]
        assert supervisor.parts["flaky"].crashes == 1  # reset by every stable run
    finally:
        await supervisor.stop()


async def _until(predicate: Callable[[], bool]) -> None:
    for _ in range(2000):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not met in time")


async def test_healthz_fails_while_a_part_crash_loops() -> None:
    alive = {"now": True}
    ops = OpsServer(
        CollectorRegistry(),
        lambda: (True, {}),
        lambda: (alive["now"], {} if alive["now"] else {"crash_loop": ["triton"]}),
    )
    await ops.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{ops.port}/healthz"
            async with http.get(url) as response:
                assert (response.status, await response.json()) == (200, {"status": "alive"})
            alive["now"] = False
            async with http.get(url) as response:
                assert response.status == 503
                assert await response.json() == {"status": "not alive", "crash_loop": ["triton"]}
    finally:
        await ops.stop()


def test_the_backoff_doubles_up_to_its_cap() -> None:
    supervisor = Supervisor(backoff_s=1.0, max_backoff_s=30.0)
    assert [supervisor.backoff(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    # A part that crash-loops all night: thousands of crashes, still the cap.
    assert [supervisor.backoff(n) for n in (1_025, 1_100, 100_000)] == [30, 30, 30]


async def test_a_part_runs_once_at_a_time() -> None:
    supervisor = Supervisor()
    supervisor.start("x", asyncio.Event().wait)
    with pytest.raises(RuntimeError, match="already running"):
        supervisor.start("x", asyncio.Event().wait)
    await supervisor.stop()


# --------------------------------------------------------------------------- in the service

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())


async def test_a_crashed_camera_pipeline_restarts_and_the_other_camera_goes_on(
    tmp_path: Path, triton_server: EmbeddedTriton, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "two.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 5}}\n"
        f"  - {{name: gate, url: '{CLIP}', sample_fps: 5}}\n"
        f"triton: {{url: '{triton_server.grpc_url}'}}\n"
        "events: {stdout: false}\nmetrics: {enabled: false}\nweb: {enabled: false}\n"
    )
    seen = {"yard": 0, "gate": 0}

    def hook(result: FrameResult) -> None:  # fails once, on the yard camera's 5th answer
        seen[result.frame.camera] += 1
        if result.frame.camera == "yard" and seen["yard"] == 5:
            raise RuntimeError("a hook that fails")

    service = Service(load_config(config), on_result=hook)
    runner = asyncio.create_task(service.run())
    states = set()
    try:
        with caplog.at_level(logging.ERROR, logger="streamer.foundation.supervisor"):
            for _ in range(3000):  # until yard has answers again after its restart
                part = service.supervisor.parts.get("camera-yard")
                if part is not None:
                    states.add((part.state, service.readiness()[0]))
                    if part.restarts == 1 and part.state == "running" and seen["yard"] > 10:
                        break
                await asyncio.sleep(0.05)
        assert ("restarting", False) in states  # not ready while it waits to restart
        gate_before = seen["gate"]
        await asyncio.sleep(2)
        assert seen["gate"] > gate_before  # the other camera never stopped
        crashes = [r for r in caplog.records if "camera-yard crashed" in r.getMessage()]
        assert len(crashes) == 1 and "RuntimeError: a hook that fails" in traceback_of(crashes[0])
        assert service.supervisor.parts["camera-gate"].restarts == 0
        _, details = service.readiness()
        assert details["parts"]["camera-yard"] == {  # type: ignore[index]
            "state": "running",
            "restarts": 1,
            "last_error": "RuntimeError: a hook that fails",
        }
        exposition = generate_latest(service.metrics.registry).decode()
        assert 'lpr_part_restarts_total{part="camera-yard"} 1.0' in exposition
        assert 'lpr_part_restarts_total{part="camera-gate"} 0.0' in exposition
        assert 'lpr_part_running{part="camera-yard"} 1.0' in exposition
    finally:
        service.request_stop()
        await asyncio.wait_for(runner, 120)
