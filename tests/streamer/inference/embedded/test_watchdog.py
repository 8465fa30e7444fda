"""The embedded Triton killed with SIGKILL mid-run comes back, and the service with it; so
does one whose Python-backend stub was killed (Triton itself would leave that model failing)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from converters import assets
from converters.paths import MODEL_REPOSITORY
from streamer.app import Service
from streamer.config import load_config
from streamer.inference.embedded.process import SHM_DIR, group_members, proc_stat, python_stubs
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.inference.embedded.watchdog import TritonWatchdog
from streamer.inference.model_errors import MODEL_ERRORS_NOT_READY, ModelErrors
from tests.polling import answering, until, until_status

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())


@pytest.mark.parametrize("victim", ["server", "lprnet stub", "hung lprnet stub"])
async def test_a_killed_embedded_triton_is_restarted_and_frames_are_answered_again(
    tmp_path: Path, victim: str
) -> None:
    config = tmp_path / "service.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 5}}\n"
        f"triton: {{model_repository: '{MODEL_REPOSITORY}'}}\n"
        "events: {stdout: false}\n"
        "metrics: {port: 0}\nweb: {enabled: false}\n"
    )
    service = Service(load_config(config))
    runner = asyncio.create_task(service.run())
    try:
        readyz = await answering(service, "yard")
        triton = service.triton
        assert triton is not None and triton.pid is not None
        old_pid, old_prefix, url = triton.pid, triton.shm_prefix, triton.grpc_url
        stubs = python_stubs(old_pid)
        # One stub per model instance (instance_group in each model's config.pbtxt).
        names = {name.rsplit("_", 2)[0] for name in stubs.values()}
        assert names == {"detector", "detector_region", "lprnet", "plate_recognition", "stn"}, stubs
        assert "lprnet_0_0" in stubs.values()
        assert triton.dead_stubs == []
        lprnet = next(p for p, name in stubs.items() if name == "lprnet_0_0")
        if victim == "server":
            os.kill(old_pid, signal.SIGKILL)
        elif victim == "lprnet stub":
            os.kill(lprnet, signal.SIGKILL)
        else:  # alive but not answering: Triton says "Stub process ... is not healthy"
            assert service.watchdog is not None
            service.watchdog.unhealthy_restart_s = 3.0  # 30 s in the service
            os.kill(lprnet, signal.SIGSTOP)
        # While it is down the service says it is not ready, and why.
        await until_status(readyz, 503, 30)
        answered = service.cameras["yard"].pipeline.stats.answered
        back_after = await until(
            lambda: service.cameras["yard"].pipeline.stats.answered > answered + 3,
            240,
            "answers after the restart",
        )
        print(f"frames answered again {back_after:.1f} s after /readyz said not ready")
        await until_status(readyz, 200, 60)
        assert triton.pid != old_pid and triton.grpc_url == url  # the same address
        assert triton.dead_stubs == [] and len(python_stubs(triton.pid)) == len(stubs)
        assert service.watchdog is not None and service.watchdog.restarts == 1
        # Nothing of the killed server is left: no zombie, no stub, no shared memory.
        assert proc_stat(old_pid) is None
        assert group_members(old_pid) == []
        assert not list(SHM_DIR.glob(f"{old_prefix}*"))
    finally:
        service.request_stop()
        await asyncio.wait_for(runner, 120)


def test_the_hang_rule_counts_only_errors_of_the_server_running_now() -> None:
    """The model failing with "Stub process ... is not healthy" for ``unhealthy_restart_s``
    names the stub; errors that came before the last restart never count again (the new
    server would otherwise be restarted before it had answered)."""
    errors = ModelErrors("plate_recognition", "127.0.0.1:8001")
    watchdog = TritonWatchdog(
        EmbeddedTriton(MODEL_REPOSITORY), model_errors=lambda: errors, unhealthy_restart_s=0.2
    )
    unhealthy = "plate_recognition failed: lprnet: Stub process 'lprnet_0_0' is not healthy."
    for _ in range(MODEL_ERRORS_NOT_READY):
        errors.error(unhealthy)
    assert watchdog._unhealthy_stub() is None  # failing, but not for 0.2 s yet
    time.sleep(0.25)
    assert watchdog._unhealthy_stub() == "lprnet_0_0"

    watchdog._restarted_at = time.monotonic()  # as _restart() leaves it
    time.sleep(0.25)
    assert watchdog._unhealthy_stub() is None  # the run goes on, but no error since
    errors.error(unhealthy)  # the new server says it too
    assert watchdog._unhealthy_stub() == "lprnet_0_0"
    errors.error("plate_recognition failed: detector: out of memory")
    assert watchdog._unhealthy_stub() is None  # another error: a restart would not help
