"""The metrics of a running service as Prometheus scrapes them: every labelled counter at 0
for its known labels from the start, no ``_created`` series, ``lpr_build_info`` from what the
Triton serves, clean for ``promtool check metrics``; a camera's series follow the camera."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
import tritonclient.grpc as grpcclient
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from converters import assets
from converters.paths import MODEL_REPOSITORY
from streamer import __version__
from streamer.app import Service
from streamer.config import load_config
from streamer.delivery.publisher import EventPublisher
from streamer.foundation.metrics import Metrics
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.ops.service_metrics import BUILD_INFO_LABELS
from tests.mqtt_broker import Broker
from tests.plate_passes import a_pass
from tests.polling import until
from tests.streamer.delivery.test_publisher import Recorder
from tests.webhook_receiver import new_secret

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
KINDS = ("model", "deadline", "stream")
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _promtool_check(scrape: str) -> None:
    """``promtool check metrics`` on ``scrape``: it must exit 0 and print nothing."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: run `make test` (apt package: prometheus)")
    checked = subprocess.run(
        [promtool, "check", "metrics"],
        input=scrape,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, "", ""), checked


async def _scrape(port: int) -> str:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        assert response.status == 200
        return await response.text()


async def _scrape_until(port: int, holds: Callable[[str], bool], what: str) -> str:
    """Scrape until ``holds(scrape)`` (60 s at most)."""
    for _ in range(300):
        scrape = await _scrape(port)
        if holds(scrape):
            return scrape
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _samples(scrape: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(scrape)
        for sample in family.samples
    }


def _labels(scrape: str, name: str) -> list[dict[str, str]]:
    return [dict(labels) for (sample, labels) in _samples(scrape) if sample == name]


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def _version_known(scrape: str) -> bool:
    infos = _labels(scrape, "lpr_build_info")
    return bool(infos) and all(i["triton_version"] != "unknown" for i in infos)


def _check_scrape(scrape: str) -> None:
    """What any early scrape holds: each Triton error kind at 0 (no frame failed yet), no
    ``_created`` series, ``lpr_build_info`` with its labels; and promtool finds it clean."""
    samples = _samples(scrape)
    errors = {kind: _value(samples, "lpr_triton_errors_total", kind=kind) for kind in KINDS}
    assert errors == dict.fromkeys(KINDS, 0.0)
    assert "_created" not in scrape
    infos = _labels(scrape, "lpr_build_info")
    assert infos and all(sorted(info) == sorted(BUILD_INFO_LABELS) for info in infos), infos
    assert all(info["version"] == __version__ for info in infos)
    _promtool_check(scrape)


def _built() -> dict[str, str]:
    """What model_repository/build_info.json says of the build."""
    info = json.loads((MODEL_REPOSITORY / "build_info.json").read_text())
    height, width = info["input_hw"]
    return {
        "model_built_at": info["built_at"],
        "model_runtime": info["runtime"],
        "model_precision": info["precision"],
        "detector_input": f"{height}x{width}",
    }


def _triton_version(url: str) -> str:
    """The server's version, asked of it here."""
    client = grpcclient.InferenceServerClient(url)
    try:
        return str(client.get_server_metadata(as_json=True, client_timeout=10)["version"])
    finally:
        client.close()


async def test_the_first_scrape_with_the_embedded_triton(tmp_path: Path) -> None:
    """configs/demo.yaml's set-up (one file camera, the embedded Triton), scraped while its
    Triton starts and as soon as the camera runs: clean, every error kind at 0, and
    ``lpr_build_info`` saying what it serves: the repository's build_info.json and the
    Triton's version as its server metadata gives it."""
    config = tmp_path / "demo.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 5, realtime: false}}\n"
        "events: {stdout: false}\nmetrics: {port: 0}\nweb: {enabled: false}\n"
    )
    service = Service(load_config(config))
    runner = asyncio.create_task(service.run())
    try:
        await until(lambda: service.ops is not None and service.ops.port is not None, 60, "ops")
        assert service.ops is not None and service.ops.port is not None
        port = service.ops.port
        starting = await _scrape(port)
        await until(lambda: bool(service.cameras), 180, "the camera to run")
        first = await _scrape(port)
        _check_scrape(starting)
        _check_scrape(first)
        assert _value(_samples(first), "lpr_events_total", camera="yard") == 0
        assert service.triton is not None
        url = service.triton.grpc_url
        known = await _scrape_until(port, _version_known, "the Triton's version")
        version = await asyncio.to_thread(_triton_version, url)
    finally:
        service.request_stop()
        await asyncio.wait_for(runner, 120)
    expected = {"endpoint": url, "version": __version__, "triton_version": version, **_built()}
    assert _labels(known, "lpr_build_info") == [expected]


def _remote_config(path: Path, triton: str, cameras: list[str], broker: Broker) -> None:
    """File cameras on the Triton at ``triton``, a webhook target nobody answers, MQTT."""
    lines = [f"  - {{name: {n}, url: '{CLIP}', sample_fps: 2, realtime: true}}" for n in cameras]
    path.write_text(
        "cameras:\n" + "\n".join(lines) + "\n"
        f"triton: {{url: '{triton}'}}\n"
        "events: {stdout: false}\nmetrics: {port: 0}\nweb: {enabled: false}\n"
        f"outbox: {{path: '{path.parent / 'outbox.sqlite3'}'}}\n"
        f"webhooks:\n  - {{name: crm, url: 'http://127.0.0.1:9/hook', secret: '{new_secret()}'}}\n"
        f"mqtt: {{host: '{broker.host}', port: {broker.port}, client_id: lpr-metrics-test}}\n"
    )


async def test_known_labels_at_0_build_info_of_a_remote_triton_and_cameras_reloaded(
    tmp_path: Path, triton_server: EmbeddedTriton
) -> None:
    """A Triton by URL: its version from its server metadata, the models' build from its
    plate_recognition's model config (the same as build_info.json). Consumers, webhook outcomes,
    MQTT outcomes and connection-failure reasons, reload outcomes and each camera's series
    exist before anything happened; a reload adds the added camera's series and removes
    every series of the removed one."""
    config = tmp_path / "remote.yaml"
    with Broker(tmp_path / "broker") as broker:
        _remote_config(config, triton_server.grpc_url, ["yard"], broker)
        service = Service(load_config(config), config_path=config)
        runner = asyncio.create_task(service.run())
        try:
            await until(lambda: bool(service.cameras), 120, "the camera to run")
            assert service.ops is not None and service.ops.port is not None
            port = service.ops.port
            first = await _scrape(port)
            known = await _scrape_until(port, _version_known, "the Triton's version")

            _remote_config(config, triton_server.grpc_url, ["gate"], broker)
            outcome = await service.reload("test")
            assert outcome["outcome"] == "applied" and outcome["removed"] == ["yard"], outcome
            reloaded = await _scrape(port)
            version = await asyncio.to_thread(_triton_version, triton_server.grpc_url)
        finally:
            service.request_stop()
            await asyncio.wait_for(runner, 120)

    _check_scrape(first)
    samples = _samples(first)
    outcomes = {
        o: _value(samples, "lpr_config_reloads_total", outcome=o)
        for o in ("applied", "unchanged", "refused")
    }
    assert outcomes == dict.fromkeys(outcomes, 0.0)
    consumers = {
        (i["consumer"], i["outcome"]) for i in _labels(first, "lpr_consumer_deliveries_total")
    }
    assert consumers == {("history", o) for o in ("delivered", "retry", "dead")}  # (no stdout)
    depth = {i["target"] for i in _labels(first, "lpr_outbox_depth")}
    assert depth == {"history", "crm", "mqtt"}  # each consumer's lag
    webhook = {i["outcome"] for i in _labels(first, "lpr_webhook_deliveries_total")}
    assert webhook == {"delivered", "retry", "dead_letter"}
    for name in ("lpr_webhook_retries_total", "lpr_webhook_dead_letters_total"):
        assert _labels(first, name) == [{"target": "crm"}], name
    assert {i["outcome"] for i in _labels(first, "lpr_mqtt_deliveries_total")} == {
        "delivered",
        "retry",
    }
    reasons = {i["reason"] for i in _labels(first, "lpr_mqtt_connection_failures_total")}
    assert reasons == {"unreachable", "refused", "lost"}
    for reason in ("refused", "lost"):  # (the broker is up and lets anyone in)
        assert _value(samples, "lpr_mqtt_connection_failures_total", reason=reason) == 0
    for name in ("lpr_events_total", "lpr_event_updates_total", "lpr_events_dropped_total"):
        assert _labels(first, name) == [{"camera": "yard"}], name
    for name in ("lpr_inference_latency_seconds", "lpr_frame_to_event_latency_seconds"):
        assert _value(samples, f"{name}_count", camera="yard") is not None, name

    assert _labels(known, "lpr_build_info") == [
        {
            "endpoint": triton_server.grpc_url,
            "version": __version__,
            "triton_version": version,
            **_built(),  # as its model config says (the converters write the build there)
        }
    ]

    _promtool_check(reloaded)
    after = _samples(reloaded)
    assert _value(after, "lpr_config_reloads_total", outcome="applied") == 1
    assert not [key for key in after if ("camera", "yard") in key[1]]  # none left, any family
    for name in ("lpr_events_total", "lpr_event_updates_total", "lpr_events_dropped_total"):
        assert _labels(reloaded, name) == [{"camera": "gate"}], name
    assert _value(after, "lpr_frames_decoded_total", camera="gate") is not None


async def test_a_pass_of_a_removed_camera_brings_no_series_back() -> None:
    """A camera stopping flushes its open passes, published after it is gone: they reach the
    observers but do not bring its series back; started again, it counts from 0."""
    metrics = Metrics()
    recorder = Recorder()
    publisher = EventPublisher(metrics, jpeg_quality=80, queue_max_bytes=2**20)
    publisher.observers = [recorder]
    task = asyncio.create_task(publisher.run())
    try:
        metrics.camera_started("gate")
        assert (
            'lpr_sink_errors_total{sink="recorder"} 0.0'
            in generate_latest(metrics.registry).decode()
        )
        metrics.camera_removed("gate")
        publisher.submit([a_pass()])
        assert await publisher.drain(10)
        assert len(recorder.events) == 1
        assert 'camera="gate"' not in generate_latest(metrics.registry).decode()

        metrics.camera_started("gate")
        before = generate_latest(metrics.registry).decode()
        assert 'lpr_events_total{camera="gate"} 0.0' in before
        publisher.submit([dataclasses.replace(a_pass(), event_id="another")])
        assert await publisher.drain(10)
        after = generate_latest(metrics.registry).decode()
        assert 'lpr_events_total{camera="gate"} 1.0' in after
        assert 'lpr_frame_to_event_latency_seconds_count{camera="gate"} 1.0' in after
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
