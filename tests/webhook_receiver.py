"""Test helpers for the webhook tests: a real HTTP receiver on 127.0.0.1, and events.

``Receiver`` is an aiohttp server that verifies every request with the
``standardwebhooks`` library, records it, and answers as scripted: a list of
behaviours taken one per request (``answer(500)``, ``slow(3)``, ...), then a
default (200). ``stop()`` closes the listening socket, so the port refuses
connections until ``start()`` binds the same port again.

``Received.body_json`` is the body as sent (the Standard Webhooks envelope by default);
``Received.payload`` the event it carries: the envelope's ``data``, or a bare body itself.

``make_event`` builds a ``PlateEvent`` directly (no Triton) with a tiny real JPEG.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from aiohttp import web
from standardwebhooks import Webhook, WebhookVerificationError

from streamer.delivery.events import PlateEvent, Sighting

_counter = itertools.count(1)


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


def tiny_jpeg(seed: int = 0) -> bytes:
    image = np.full((12, 40, 3), seed % 256, np.uint8)
    ok, encoded = cv2.imencode(".jpg", image)
    assert ok
    return encoded.tobytes()


def make_event(camera: str = "gate", index: int | None = None) -> PlateEvent:
    n = next(_counter) if index is None else index
    seen = Sighting("2026-11-30T17:01:53.024+00:00", float(n))
    return PlateEvent(
        event_id=str(uuid.uuid4()),
        camera=camera,
        text=f"A{n % 1000:03d}BC77",
        confidence=0.9,
        candidates=[(f"A{n % 1000:03d}BC77", 0.9)],
        track_id=n,
        reads=10,
        evidence=8,
        first_seen=seen,
        last_seen=seen,
        box=(10.0, 20.0, 110.0, 45.0),
        crop_jpeg=tiny_jpeg(n),
        reason="confident",
        first_seen_monotonic=time.monotonic(),
    )


@dataclass
class Received:
    """One request as the receiver saw it."""

    at: float  # time.monotonic() on arrival
    path: str
    headers: dict[str, str]
    body: bytes
    verified: bool
    verify_error: str | None
    status: int | None = None  # what was answered (None: still being answered)
    #: The JSON body (None: not JSON).
    body_json: Any = None

    @property
    def enveloped(self) -> bool:
        """The body is the Standard Webhooks envelope ``{"type", "timestamp", "data"}``."""
        body = self.body_json
        return isinstance(body, dict) and set(body) == {"type", "timestamp", "data"}

    @property
    def payload(self) -> dict[str, Any]:
        """The event: the envelope's ``data``, or the bare body ({} when not a JSON object)."""
        if self.enveloped:
            return self.body_json["data"]
        return self.body_json if isinstance(self.body_json, dict) else {}

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


Behaviour = Callable[[Received], Awaitable[web.Response]]


def answer(status: int, body: str = "", headers: dict[str, str] | None = None) -> Behaviour:
    async def respond(_: Received) -> web.Response:
        return web.Response(status=status, text=body, headers=headers)

    return respond


def slow(seconds: float, status: int = 504) -> Behaviour:
    """Answer only after ``seconds`` (the client has given up by then: not a delivery)."""

    async def respond(_: Received) -> web.Response:
        await asyncio.sleep(seconds)
        return web.Response(status=status, text="too late")

    return respond


class Receiver:
    """A webhook receiver on 127.0.0.1 that verifies signatures with ``standardwebhooks``."""

    def __init__(self, secret: str, port: int = 0) -> None:
        self.secret = secret
        self.port = port
        self.requests: list[Received] = []
        self.script: list[Behaviour] = []
        self.default: Behaviour = answer(200, "ok")
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        assert self.port, "start() first"
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        verified, error = True, None
        try:
            Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError as exc:
            verified, error = False, str(exc)
        received = Received(time.monotonic(), request.path, headers, body, verified, error)
        with contextlib.suppress(ValueError):
            received.body_json = json.loads(body)
        self.requests.append(received)
        if not verified:
            received.status = 401
            return web.Response(status=401, text="bad signature")
        behaviour = self.script.pop(0) if self.script else self.default
        response = await behaviour(received)
        received.status = response.status
        return response

    # ------------------------------------------------------------------ queries

    def delivered(self, path: str | None = None) -> list[Received]:
        return [r for r in self.requests if r.delivered and (path is None or r.path == path)]

    def delivered_ids(self, path: str | None = None) -> list[str]:
        return [r.webhook_id for r in self.delivered(path)]


async def eventually(
    predicate: Callable[[], bool], within: float, what: str = "condition", interval: float = 0.05
) -> float:
    """Wait until ``predicate()``; returns the seconds it took; fails after ``within`` s."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > within:
            raise AssertionError(f"timed out after {within:g} s waiting for {what}")
        await asyncio.sleep(interval)
    return time.monotonic() - start


async def free_port() -> int:
    """A port that was free a moment ago (bound then released by a receiver)."""
    receiver = await Receiver(new_secret()).start()
    port = receiver.port
    await receiver.stop()
    return port
