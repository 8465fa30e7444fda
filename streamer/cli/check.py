"""``streamer check --config FILE``: is this site set up right? Asked without starting it.

One line per item, ``ok`` or ``FAIL``, then the exit code: 0 when every item is ok, 1 when
one failed, 2 for a config that does not load (the error, as ``run`` gives it). Items:

* ``config``: the file loads through the schema (every camera and Triton URL resolved);
* ``triton``: each endpoint is live and ready and serves ``triton.model`` (its optional
  inputs and the repository's other models named); the embedded default: the model
  repository is built;
* ``camera NAME``: the source opens within its ``open_timeout_s`` and decodes a frame: codec,
  resolution, the rate (a live source is read for ``--probe-s`` seconds and its frames
  counted; a file gives its declared rate), the time to its first frame;
* ``mqtt``: the broker takes the connection and the credentials (as another client id, so
  a running service keeps its own connection);
* ``webhook NAME``: its host answers a TCP (and for https, TLS) connection;
* ``history``: PostgreSQL takes the DSN; SQLite's folder is writable; the ``outbox`` and
  ``events.file`` folders likewise.

Nothing is written or published: no event, no discovery config, no history row. Secrets
never appear in a line (URLs as their redacted form, errors through ``redact_text``).
Checks run concurrently; each is bounded by its own timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import av
import tritonclient.grpc.aio as aioclient

from streamer.cli.arguments import settings_or_exit
from streamer.config import CameraConfig, MqttConfig, Settings
from streamer.foundation.build_info import BUILD_INFO_FILE
from streamer.foundation.redact import redact_text
from streamer.inference.client import short_error
from streamer.ingest.decode import OpenTimeoutError, declared_rate, is_live, open_video

#: Seconds a live camera is read for its frame rate (``--probe-s``).
DEFAULT_PROBE_S = 3.0
#: Seconds for a connection to a broker, a webhook host or a database.
CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Finding:
    """One line of the report."""

    ok: bool
    item: str
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.item}: {redact_text(self.detail)}"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``check`` to an ``add_subparsers()`` object (of ``streamer``)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "check", help="check a config, its cameras, Tritons and sinks, without starting"
    )
    parser.add_argument("--config", type=Path, required=True, help="the service's YAML config")
    parser.add_argument(
        "--probe-s",
        type=float,
        default=DEFAULT_PROBE_S,
        metavar="S",
        help=f"seconds a live camera is read for its frame rate (default {DEFAULT_PROBE_S:g})",
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    settings = settings_or_exit(args.config)
    cameras = settings.enabled_cameras
    print(Finding(True, "config", f"{args.config} ({len(cameras)} camera(s))").line(), flush=True)
    findings = asyncio.run(check(settings, max(0.0, args.probe_s), echo=True))
    return 0 if all(f.ok for f in findings) else 1


async def check(settings: Settings, probe_s: float, echo: bool = False) -> list[Finding]:
    """Every item of the module docstring but the config, concurrently; each finding is
    printed as it comes with ``echo``, and all are returned in the report's order."""
    checks: list[Awaitable[Finding]] = []
    endpoints = settings.triton.endpoints
    if endpoints:
        checks += [_triton(url, settings) for url in endpoints]
    else:
        checks.append(asyncio.to_thread(_embedded, settings))
    checks += [_camera(camera, probe_s) for camera in settings.enabled_cameras]
    if settings.mqtt is not None:
        checks.append(_mqtt(settings.mqtt))
    checks += [_webhook(t.name, t.url, t.redacted_url) for t in settings.webhooks]
    checks += _folders(settings)

    async def report(one: Awaitable[Finding]) -> Finding:
        finding = await one
        if echo:
            print(finding.line(), flush=True)
        return finding

    return list(await asyncio.gather(*(report(c) for c in checks)))


async def _triton(url: str, settings: Settings) -> Finding:
    item, model = f"triton {url}", settings.triton.model
    client = aioclient.InferenceServerClient(url)
    try:
        async with asyncio.timeout(settings.triton.connect_timeout_s):
            if not await client.is_server_live():
                return Finding(False, item, "not live")
            index = await client.get_model_repository_index(as_json=True)
            states = {m["name"]: m.get("state", "UNAVAILABLE") for m in index.get("models", [])}
            if not await client.is_model_ready(model):
                seen = ", ".join(f"{n} {s}" for n, s in sorted(states.items())) or "none"
                return Finding(False, item, f"model {model} is not ready (models: {seen})")
            metadata = await client.get_model_metadata(model, as_json=True)
    except TimeoutError:
        return Finding(False, item, f"no answer within {settings.triton.connect_timeout_s:g} s")
    except Exception as exc:  # the client's errors: unreachable, refused, bad address
        return Finding(False, item, f"not reachable: {short_error(exc)}")
    finally:
        await client.close()
    inputs = [i["name"] for i in metadata.get("inputs", [])]
    ready = sorted(n for n, s in states.items() if s == "READY")
    return Finding(
        True, item, f"ready; {model} takes {', '.join(inputs)}; models: {' '.join(ready)}"
    )


def _embedded(settings: Settings) -> Finding:
    repository = settings.triton.model_repository
    item = "triton (embedded)"
    config = repository / settings.triton.model / "config.pbtxt"
    if not config.is_file():
        return Finding(False, item, f"{config} is missing: build the models (make models)")
    try:
        info = json.loads((repository / BUILD_INFO_FILE).read_text())
    except (OSError, ValueError):
        return Finding(False, item, f"{repository}: no readable {BUILD_INFO_FILE}: rebuild it")
    built = f"{info.get('target')} {info.get('runtime', '')} {info.get('precision', '')}".strip()
    return Finding(
        True, item, f"model repository {repository} ({built}, built {info.get('built_at')})"
    )


async def _camera(camera: CameraConfig, probe_s: float) -> Finding:
    item = f"camera {camera.name}"
    try:
        detail = await asyncio.to_thread(_probe, camera, probe_s)
    except OpenTimeoutError as exc:
        return Finding(False, item, f"{camera.redacted_url}: {exc}")
    except av.error.FFmpegError as exc:  # (before ValueError: PyAV's errors are ValueErrors)
        reason = getattr(exc, "strerror", None) or short_error(exc)
        return Finding(False, item, f"{camera.redacted_url}: cannot open: {reason}")
    except ValueError as exc:  # no video stream, no frame decoded
        return Finding(False, item, f"{camera.redacted_url}: {exc}")
    except OSError as exc:
        return Finding(False, item, f"{camera.redacted_url}: cannot open: {short_error(exc)}")
    return Finding(True, item, detail)


def _probe(camera: CameraConfig, probe_s: float) -> str:
    """Open, decode a first frame, and for a live source count frames for ``probe_s``."""
    live = is_live(camera.url)
    started = time.monotonic()
    container, stream = open_video(
        camera.url,
        live=live,
        rtsp_transport=camera.rtsp_transport,
        open_timeout_s=camera.open_timeout_s,
        read_timeout_s=camera.read_timeout_s,
    )
    try:
        codec = stream.codec_context.name
        first: Any = None
        frames = 0
        deadline = started + camera.open_timeout_s + camera.read_timeout_s
        for frame in container.decode(stream):
            now = time.monotonic()
            if first is None:
                first, first_at = frame, now
            frames += 1
            if not live or now - first_at >= probe_s or now > deadline + probe_s:
                break
        if first is None:
            raise ValueError(f"opened ({codec}) but no frame could be decoded")
        to_first = first_at - started
        if live and frames > 1 and now > first_at:
            rate = f"{(frames - 1) / (now - first_at):.1f} fps measured over {now - first_at:.1f} s"
        else:
            declared = declared_rate(stream)
            rate = f"{declared:.1f} fps declared" if declared else "rate unknown"
        return f"{codec} {first.width}x{first.height}, {rate}, first frame after {to_first:.2f} s"
    finally:
        container.close()


async def _mqtt(config: MqttConfig) -> Finding:
    from aiomqtt import MqttError  # (the MQTT client only where a broker is configured)

    from streamer.delivery.mqtt_connection import describe_failure, new_client

    item = f"mqtt {config.broker}"
    client = new_client(
        config, v5=config.protocol != "3.1.1", identifier=f"{config.client_id}-check", will=None
    )
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S + config.timeout_s):
            async with client:
                pass
    except TimeoutError:
        return Finding(False, item, "no answer from the broker")
    except MqttError as exc:
        return Finding(False, item, describe_failure(exc)[1])
    return Finding(True, item, "the broker took the connection and the credentials")


async def _webhook(name: str, url: str, redacted: str) -> Finding:
    item = f"webhook {name}"
    parts = urlsplit(url)
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            _, writer = await asyncio.open_connection(
                parts.hostname, port, ssl=ssl.create_default_context() if secure else None
            )
            writer.close()
            await writer.wait_closed()
    except TimeoutError:
        return Finding(False, item, f"{redacted}: no answer within {CONNECT_TIMEOUT_S:g} s")
    except (OSError, ssl.SSLError) as exc:
        return Finding(False, item, f"{redacted}: cannot connect: {short_error(exc)}")
    return Finding(True, item, f"{redacted}: the host takes connections")


def _folders(settings: Settings) -> list[Awaitable[Finding]]:
    checks: list[Awaitable[Finding]] = [
        asyncio.to_thread(_writable, "outbox", settings.outbox.path)
    ]
    storage = settings.storage
    if storage.enabled and storage.backend == "postgresql" and storage.dsn is not None:
        checks.append(_postgresql(storage.dsn.get_secret_value()))
    elif storage.enabled:
        checks.append(asyncio.to_thread(_writable, "history", storage.path))
    if settings.events.file is not None:
        checks.append(asyncio.to_thread(_writable, "events.file", settings.events.file))
    return checks


def _writable(item: str, path: Path) -> Finding:
    """Whether the service can write ``path``: it makes the missing folders of it at start
    (as streamer/foundation/sqlite_file.py and the events file do), so the nearest folder
    that exists must be one this user may write in."""
    folder = path.parent
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return Finding(False, item, f"{existing} is a file: no folder {folder} (for {path})")
    if not os.access(existing, os.W_OK | os.X_OK) or (
        path.exists() and not os.access(path, os.W_OK)
    ):
        return Finding(False, item, f"{path} is not writable by this user")
    if existing != folder:
        return Finding(True, item, f"{path} can be written ({folder} made at start)")
    return Finding(True, item, f"{path} can be written")


async def _postgresql(dsn: str) -> Finding:
    import asyncpg  # (only where the history is on PostgreSQL)

    try:
        connection = await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        return Finding(
            False, "history", f"PostgreSQL refused or is unreachable: {short_error(exc)}"
        )
    await connection.close(timeout=CONNECT_TIMEOUT_S)
    return Finding(True, "history", "PostgreSQL took the connection")
