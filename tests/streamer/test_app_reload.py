"""Reload without restart, on real parts: a GStreamer RTSP server, a real Triton, SIGHUP and
``POST /api/reload`` on a running service."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from converters import assets
from streamer.app import Service
from streamer.config import load_config
from streamer.inference.embedded.server import EmbeddedTriton
from tests.polling import until
from tests.rtsp_server import RtspServer

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
TOKEN = "reload-test-token-0123456789"


def _config(path: Path, rtsp: RtspServer, triton: EmbeddedTriton, cameras: list[str]) -> None:
    lines = [
        f"  - {{name: {name}, url: '{rtsp.url('/' + name)}', sample_fps: 2, "
        "read_timeout_s: 2, stall_timeout_s: 5}"
        for name in cameras
    ]
    path.write_text(
        "cameras:\n" + "\n".join(lines) + "\n"
        f"triton: {{url: '{triton.grpc_url}'}}\n"
        "events: {stdout: false}\n"
        "metrics: {enabled: false}\n"
        f"web: {{port: 0, token: '{TOKEN}'}}\n"
    )


def _post_reload(port: int, *, token: str | None = TOKEN) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/reload", method="POST")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        return exc.code, (json.loads(body) if body.startswith(b"{") else {"text": body.decode()})


class DecodeWatch:
    """Samples a camera's decoded-frame counter every 0.25 s while the test runs."""

    def __init__(self, service: Service, camera: str) -> None:
        self.service, self.camera = service, camera
        self.samples: list[int] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.samples.append(self.service.cameras[self.camera].source.stats.decoded)
            await asyncio.sleep(0.25)

    def longest_stall(self) -> int:
        """The most consecutive samples without a new frame."""
        longest = run = 0
        for before, after in zip(self.samples, self.samples[1:], strict=False):
            run = run + 1 if after == before else 0
            longest = max(longest, run)
        return longest

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def test_reload_starts_added_stops_removed_and_leaves_the_others_running(
    tmp_path: Path, triton_server: EmbeddedTriton, caplog: Any
) -> None:
    config = tmp_path / "cameras.yaml"
    with RtspServer(CLIP, mounts=("/a", "/b", "/c")) as rtsp:
        _config(config, rtsp, triton_server, ["a", "b"])
        service = Service(load_config(config), config_path=config)
        run = asyncio.create_task(service.run())
        try:
            await until(
                lambda: (
                    "a" in service.cameras
                    and "b" in service.cameras
                    and service.cameras["a"].source.stats.decoded > 0
                    and service.cameras["b"].source.stats.decoded > 0
                ),
                60,
                "cameras a and b decode",
            )
            a = service.cameras["a"]
            a_source, a_task = a.source, a.task
            watch = DecodeWatch(service, "a")
            await asyncio.sleep(1.0)

            # The file gains c, loses b and leaves a as it is; SIGHUP, as an operator sends it.
            _config(config, rtsp, triton_server, ["a", "c"])
            os.kill(os.getpid(), signal.SIGHUP)
            await until(
                lambda: (
                    "c" in service.cameras
                    and service.cameras["c"].source.stats.decoded > 0
                    and "b" not in service.cameras
                ),
                60,
                "c decodes, b has stopped",
            )
            assert service.reloader.last is not None
            assert service.reloader.last["added"] == ["c"]
            assert service.reloader.last["removed"] == ["b"]
            assert service.reloader.last["restarted"] == []
            assert "camera-b" not in service.supervisor.parts
            assert service.supervisor.parts["camera-c"].state == "running"
            b_gone = [s.name for s in service.camera_status()]
            assert b_gone == ["a", "c"]

            # A broken edit through the API: refused with the one-line message, nothing stops.
            config.write_text(config.read_text().replace("sample_fps: 2", "sample_fps: -1", 1))
            assert service.web is not None and service.web.port is not None
            status, _ = await asyncio.to_thread(_post_reload, service.web.port, token=None)
            assert status == 401
            with caplog.at_level(logging.ERROR, logger="streamer.ops.reload"):
                status, body = await asyncio.to_thread(_post_reload, service.web.port)
            assert status == 422 and body["outcome"] == "refused", body
            assert "sample_fps" in body["error"] and "cameras.yaml" in body["error"]
            assert "\n" not in body["error"]
            refused = [r for r in caplog.records if "refused" in r.getMessage()]
            assert len(refused) == 1 and "\n" not in refused[0].getMessage()
            decoded = {n: service.cameras[n].source.stats.decoded for n in ("a", "c")}
            await asyncio.sleep(2.0)
            for name in ("a", "c"):
                assert service.cameras[name].source.stats.decoded > decoded[name], name
                assert service.cameras[name].source.stats.state == "connected"
            samples = (
                service.metrics.registry.get_sample_value(
                    "lpr_config_reloads_total", {"outcome": outcome}
                )
                for outcome in ("applied", "refused")
            )
            assert list(samples) == [1.0, 1.0]

            # Camera a never stopped: the same source and task, no reconnect, frames throughout.
            await watch.stop()
            assert service.cameras["a"].source is a_source and service.cameras["a"].task is a_task
            assert a_source.stats.reconnects == 0 and a_source.stats.state == "connected"
            assert len(watch.samples) >= 10  # from before the SIGHUP to after the refusal
            assert watch.longest_stall() < 8, watch.samples  # 2 s (a reconnect takes longer)
            print(
                f"camera a across the reloads: {len(watch.samples)} samples 0.25 s apart, "
                f"decoded {watch.samples[0]} -> {watch.samples[-1]}, longest stall "
                f"{watch.longest_stall() * 0.25:.2f} s, reconnects {a_source.stats.reconnects}"
            )
        finally:
            service.request_stop()
            await asyncio.wait_for(run, 60)
