"""The history through the service and its API: the footage's events and pictures, written by
one run of the service, searched and served by the next."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from converters import assets
from converters.paths import PROJECT_ROOT
from streamer.app import Service
from streamer.config import load_config
from streamer.inference.embedded.server import EmbeddedTriton
from tests.polling import until

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())


def _send(method: str, url: str, headers: dict[str, str]) -> tuple[int, bytes, str]:
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get("Content-Type", "")


def _get(url: str) -> tuple[int, bytes, str]:
    return _send("GET", url, {})


def _json(url: str) -> Any:
    status, body, _ = _get(url)
    assert status == 200, (status, body[:300])
    return json.loads(body)


async def test_events_and_pictures_survive_a_restart_and_are_searched(
    tmp_path: Path, triton_server: EmbeddedTriton
) -> None:
    config = tmp_path / "site.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 5, realtime: false}}\n"
        f"triton: {{url: '{triton_server.grpc_url}'}}\n"
        "events: {stdout: true}\nmetrics: {enabled: false}\nweb: {enabled: false}\n"
        "storage: {path: history/events.sqlite3, frame_max_width: 480}\n"
    )
    first = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "streamer", "run", "--config", str(config), "--once"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "LPR_ASSETS_DIR": str(assets.default_assets_dir())},
    )
    assert first.returncode == 0, first.stderr[-3000:]
    reported = {json.loads(line)["text"]: json.loads(line) for line in first.stdout.splitlines()}
    assert set(reported) == {"O567AM76", "Y836XH76"}
    assert (tmp_path / "history" / "events.sqlite3").is_file()
    erased = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "streamer",
            "erase",
            "--config",
            str(config),
            "--plate",
            "y836 xh76",
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert erased.returncode == 0, erased.stderr
    assert json.loads(erased.stdout)["erased"]["history"] == 1
    assert "Y836XH76" not in erased.stdout + erased.stderr and "erasure of a plate" in erased.stderr

    # The next run: no camera running, the web view on; only the history knows the events.
    config.write_text(
        config.read_text()
        .replace("realtime: false}", "realtime: false, enabled: false}")
        .replace("web: {enabled: false}", "web: {port: 0}")
    )
    service = Service(load_config(config), config_path=config)
    run = asyncio.create_task(service.run())
    try:
        await until(lambda: service.web is not None and service.web.port, 60, "the web view")
        assert service.web is not None
        base = f"http://127.0.0.1:{service.web.port}"
        page = await asyncio.to_thread(_json, f"{base}/api/events?plate=O567AM76")
        (found,) = page["events"]
        assert found["event_id"] == reported["O567AM76"]["event_id"] and page["next_cursor"] is None
        fuzzy = await asyncio.to_thread(_json, f"{base}/api/events?plate=O567AM7&fuzzy=true")
        assert [e["text"] for e in fuzzy["events"]] == ["O567AM76"]
        gone = await asyncio.to_thread(_json, f"{base}/api/events?plate=Y836XH76")
        assert gone["events"] == []  # erased from the command line before this run
        page = await asyncio.to_thread(_json, f"{base}/api/events?camera=yard&limit=1")
        assert [e["text"] for e in page["events"]] == ["O567AM76"] and page["next_cursor"] is None

        one = await asyncio.to_thread(_json, f"{base}/api/events/{found['event_id']}")
        assert one["text"] == "O567AM76" and [v["version"] for v in one["versions"]] == [1]
        for url, width in ((found["crop_url"], None), (found["frame_url"], 480)):
            status, body, kind = await asyncio.to_thread(_get, base + url)
            assert status == 200 and kind == "image/jpeg"
            picture = cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR)
            assert picture is not None
            if width is not None:  # the vehicle: bigger than the plate, scaled down
                assert picture.shape[1] <= width and picture.shape[1] > 100
        status, _, _ = await asyncio.to_thread(
            _send, "DELETE", f"{base}/api/events?plate=O567AM76", {"Origin": "http://evil.test"}
        )
        assert status == 403
        status, body, _ = await asyncio.to_thread(
            _send, "DELETE", f"{base}/api/events?plate=O567AM76", {}
        )
        assert status == 200 and json.loads(body)["erased"]["history"] == 1, body
        assert b"O567AM76" not in body
        status, _, _ = await asyncio.to_thread(_get, base + found["crop_url"])
        assert status == 404
        assert (await asyncio.to_thread(_json, f"{base}/api/events"))["events"] == []
        status, body, _ = await asyncio.to_thread(_get, f"{base}/api/events?after=yesterday")
        assert status == 400 and b"after" in body
        status, _, _ = await asyncio.to_thread(_get, f"{base}/api/events/{'0' * 8}/frame.jpg")
        assert status == 404
    finally:
        service.request_stop()
        await asyncio.wait_for(run, 60)
