"""/metrics, /healthz and /readyz of a running service, on real Triton and footage."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from converters import assets
from streamer.app import Service
from streamer.config import load_config
from streamer.inference.embedded.server import EmbeddedTriton

if TYPE_CHECKING:
    from tests.conftest import SpareTriton

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())


def _config(tmp_path: Path, triton: str, events: str = "") -> Path:
    config = tmp_path / "ops.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 5, realtime: false}}\n"
        f"{triton}"
        f"events: {{stdout: false{events}}}\n"
        "metrics: {port: 0}\nweb: {port: 0}\n"
    )
    return config


async def _until(predicate: Callable[[], bool], timeout_s: float = 120.0) -> None:
    """Poll a condition of the running service (tests only)."""
    for _ in range(int(timeout_s * 10)):
        if predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("condition not met in time")


def _ops_up(service: Service) -> bool:
    return service.ops is not None and service.ops.port is not None and bool(service.cameras)


async def _get(port: int, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.text()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


async def test_metrics_move_during_a_run(tmp_path: Path, triton_server: EmbeddedTriton) -> None:
    config = _config(tmp_path, f"triton: {{url: '{triton_server.grpc_url}'}}\n")
    service = Service(load_config(config), once=True)
    runner = asyncio.create_task(service.run())
    try:
        await _until(lambda: _ops_up(service))
        assert service.ops is not None and service.ops.port is not None
        port = service.ops.port
        assert (await _get(port, "/healthz"))[0] == 200
        # The first sample as soon as a frame went to Triton: the camera is then still
        # decoding (a file camera waits on its bounded queue), so every counter must move.
        # A fixed sleep is not enough: a fast machine decodes the whole clip in it.
        first: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for _ in range(1200):
            first = _samples((await _get(port, "/metrics"))[1])
            if first.get(("lpr_frames_sent_total", (("camera", "yard"),)), 0) >= 1:
                break
            await asyncio.sleep(0.1)
        await _until(lambda: service.events_emitted >= 2 or runner.done())
        second = _samples((await _get(port, "/metrics"))[1])
    finally:
        service.request_stop()
        await asyncio.wait_for(runner, 120)
    cam = (("camera", "yard"),)
    for name in (
        "lpr_frames_decoded_total",
        "lpr_frames_sampled_total",
        "lpr_frames_sent_total",
        "lpr_decode_errors_total",
        "lpr_camera_reconnects_total",
        "lpr_frames_in_flight",
        "lpr_active_tracks",
        "lpr_camera_up",
    ):
        assert (name, cam) in second, name
    for name in ("lpr_frames_decoded_total", "lpr_frames_sampled_total", "lpr_frames_sent_total"):
        assert second[(name, cam)] > first[(name, cam)] > 0, name
    for reason in ("backpressure", "inference_failed"):
        assert ("lpr_frames_dropped_total", (*cam, ("reason", reason))) in second
    assert second[("lpr_triton_ready", ())] == 1
    # The process collector: memory and CPU of the service, CPU rising with the work done.
    assert second[("process_resident_memory_bytes", ())] > 50 * 2**20
    assert second[("process_cpu_seconds_total", ())] > first[("process_cpu_seconds_total", ())]
    assert second[("lpr_events_total", cam)] == 2
    assert second[("lpr_frame_to_event_latency_seconds_count", cam)] == 2
    assert second[("lpr_frame_to_event_latency_seconds_sum", cam)] > 0
    assert (
        second[("lpr_inference_latency_seconds_count", cam)]
        >= second[("lpr_frames_sent_total", cam)] - 2
    )


async def test_readiness_follows_triton_and_events_resume(
    tmp_path: Path, spare_triton: SpareTriton
) -> None:
    """Triton stops mid-run: /readyz turns 503, the service keeps running; Triton
    comes back on the same port: /readyz turns 200 and events flow again."""
    server = await spare_triton.running()
    url = server.grpc_url
    # Realtime looping file; a short dedup window so every loop reports again.
    config = _config(tmp_path, f"triton: {{url: '{url}'}}\n", ", dedup_window_s: 1")
    config.write_text(config.read_text().replace("realtime: false", "realtime: true"))
    service = Service(load_config(config))
    runner = asyncio.create_task(service.run())
    try:
        await _until(lambda: _ops_up(service))
        assert service.ops is not None and service.ops.port is not None
        port = service.ops.port
        for _ in range(60):
            if (await _get(port, "/readyz"))[0] == 200 and service.events_emitted > 0:
                break
            await asyncio.sleep(1)
        status, body = await _get(port, "/readyz")
        assert status == 200 and '"triton": "ready"' in body and '"yard"' in body

        await server.astop()
        for _ in range(20):
            if (await _get(port, "/readyz"))[0] == 503:
                break
            await asyncio.sleep(0.5)
        status, body = await _get(port, "/readyz")
        assert status == 503 and '"triton": "unavailable: ' in body  # with the reason
        assert not runner.done()
        assert (await _get(port, "/healthz"))[0] == 200

        server = await spare_triton.running()  # on the same port
        assert server.grpc_url == url
        for _ in range(60):
            if (await _get(port, "/readyz"))[0] == 200:
                break
            await asyncio.sleep(0.5)
        assert (await _get(port, "/readyz"))[0] == 200
        before = service.events_emitted
        for _ in range(60):
            if service.events_emitted > before:
                break
            await asyncio.sleep(1)
        assert service.events_emitted > before, "no event after Triton came back"
        assert not runner.done()
    finally:
        service.request_stop()
        await asyncio.wait_for(runner, 120)
