"""Secrets in a webhook URL never reach the logs: the service run as a user runs it (a real
CPU Triton, the clip, a real receiver that fails at first), at DEBUG, with a key in the
webhook URL's path and another in its query; neither appears anywhere in what it printed."""

from __future__ import annotations

import asyncio
import secrets
import string
import sys
from pathlib import Path

from converters import assets
from converters.paths import PROJECT_ROOT
from streamer.inference.embedded.server import EmbeddedTriton
from tests.webhook_receiver import Receiver, answer, new_secret

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())


def _key(n: int) -> str:
    """A random key of letters and digits, as webhook services issue them."""
    alphabet = string.ascii_letters + string.digits
    return "Kx9" + "".join(secrets.choice(alphabet) for _ in range(n - 3))


async def test_a_webhook_urls_path_and_query_keys_are_in_no_log_line(
    triton_server: EmbeddedTriton, tmp_path: Path
) -> None:
    path_key, query_key, signing = _key(24), _key(20), new_secret()
    receiver = await Receiver(signing).start()
    receiver.script += [answer(503, "deploying")] * 2  # retries: the failure paths log too
    url = f"{receiver.url.rstrip('/')}/services/T0AAAAAAA/{path_key}?code={query_key}&v=2"
    config = tmp_path / "site.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 5, realtime: false}}\n"
        f"triton: {{url: '{triton_server.grpc_url}'}}\n"
        "events: {stdout: false}\nmetrics: {enabled: false}\nweb: {enabled: false}\n"
        f"webhooks:\n  - {{name: rx, url: '{url}', secret: '{signing}'}}\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "streamer",
        "--log-level",
        "DEBUG",
        "run",
        "--config",
        str(config),
        "--once",
        cwd=PROJECT_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout=240)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await receiver.stop()
    logs = out.decode() + err.decode()
    assert process.returncode == 0, logs[-3000:]
    # The run did what it should: the events reached the URL with its keys, after retries.
    delivered = receiver.delivered()
    assert len(delivered) == 2 and all(path_key in r.path for r in delivered)
    assert len(receiver.requests) >= 4
    # The logs name the target and where it is, never its keys.
    assert "webhook" in logs and "/services/T0AAAAAAA/***" in logs, logs[-3000:]
    assert "DEBUG" in logs  # (DEBUG lines included)
    for key in (path_key, query_key, signing):
        assert key not in logs
