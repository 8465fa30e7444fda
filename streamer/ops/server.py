"""Operations endpoint: ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz``.

``/healthz`` answers 200 while the process and its event loop run and no part is
in a crash loop (it cannot make progress by itself: restart it). ``/readyz``
answers 200 only when Triton is reachable with the model ready (the gRPC stream
is open) and the event outbox, if any, is healthy; its JSON body has the state
of every camera. Neither carries a secret: camera URLs are shown redacted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from streamer.foundation.listener import Listener

LOG = logging.getLogger(__name__)

Readiness = Callable[[], tuple[bool, dict[str, Any]]]


def _always_alive() -> tuple[bool, dict[str, Any]]:
    return True, {}


class OpsServer:
    def __init__(
        self,
        registry: CollectorRegistry,
        readiness: Readiness,
        liveness: Readiness = _always_alive,
    ) -> None:
        self.registry = registry
        self.readiness = readiness
        self.liveness = liveness
        self.listener: Listener | None = None
        self.port: int | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        return app

    async def start(self, host: str, port: int) -> None:
        self.listener = Listener(self.app(), host, port, "ops endpoint", shutdown_timeout_s=2.0)
        await self.listener.start()
        self.port = self.listener.port
        LOG.info("ops endpoint on http://%s:%s (/metrics, /healthz, /readyz)", host, self.port)

    async def stop(self) -> None:
        if self.listener is not None:
            await self.listener.stop()

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        alive, details = self.liveness()
        body = {"status": "alive" if alive else "not alive", **details}
        return web.json_response(body, status=200 if alive else 503)

    async def _readyz(self, request: web.Request) -> web.Response:
        ready, details = self.readiness()
        body = {"status": "ready" if ready else "not ready", **details}
        return web.Response(
            text=json.dumps(body), status=200 if ready else 503, content_type="application/json"
        )
