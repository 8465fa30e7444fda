"""The whole service running in a thread of its own (its own event loop), for tests that talk
to it as a client would: over HTTP, from the test's thread, a browser or a subprocess."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from converters import assets
from streamer.app import Service
from streamer.config import load_config
from streamer.foundation.shards import Shard
from tests.webhook_receiver import Receiver

T = TypeVar("T")
CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
#: The web token of the service the ``running`` fixture starts (tests/streamer/web/conftest.py).
TOKEN = "api-test-token-0123456789"
#: Seconds its signed picture links answer: long enough to fetch one, short enough to wait out.
LINK_TTL_S = 12


@dataclass
class RunningService:
    service: Service
    #: http://127.0.0.1:<port> of its web server.
    base: str
    receiver: Receiver
    loop: asyncio.AbstractEventLoop

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 30) -> T:
        """Run ``coro`` on the service's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)


def clip_service_config(triton_url: str, secret: str) -> str:
    """The service on the clip (looping), a token, the history, a webhook receiver that is
    sent signed picture links, and a known-plate list with an alert."""
    return (
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 5, realtime: false}}\n"
        f"triton: {{url: '{triton_url}'}}\n"
        "events: {stdout: false}\nmetrics: {enabled: false}\n"
        f"web: {{port: 0, token: {TOKEN}, link_ttl_s: {LINK_TTL_S}}}\n"
        "known_plates: {staff: {plates: [O567AM76], alert: true}}\n"
        "webhooks:\n"
        f"  - {{name: rx, url: '{{receiver}}', secret: '{secret}', crop: url,\n"
        "      public_base_url: 'https://lpr.example.com/'}\n"
    )


@contextlib.contextmanager
def running_service(
    config_path: Path,
    config_text: str,
    secret: str,
    timeout_s: float = 120,
    shard: Shard | None = None,
) -> Iterator[RunningService]:
    """The service of ``config_text`` (``{receiver}``: the webhook receiver's URL, which
    verifies with ``secret``), as replica ``shard`` (default: the only one), until the block
    ends."""
    started: concurrent.futures.Future[RunningService] = concurrent.futures.Future()
    stop = threading.Event()

    async def main() -> None:
        receiver = await Receiver(secret).start()
        try:
            text = config_text.replace("{receiver}", receiver.url)
            await asyncio.to_thread(config_path.write_text, text)
            service = Service(load_config(config_path), config_path=config_path, shard=shard)
            run = asyncio.create_task(service.run())
            loop = asyncio.get_running_loop()
            # (polled: the service sets web.port as it starts, and signals nothing)
            while not (service.web is not None and service.web.port) and not run.done():  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            if run.done():
                started.set_exception(RuntimeError(f"the service ended: {run.result()}"))
                return
            assert service.web is not None
            base = f"http://127.0.0.1:{service.web.port}"
            started.set_result(RunningService(service, base, receiver, loop))
            await asyncio.to_thread(stop.wait)
            service.request_stop()
            await asyncio.wait_for(run, 60)
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            raise
        finally:
            await receiver.stop()

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="service", daemon=True)
    thread.start()
    try:
        yield started.result(timeout_s)
    finally:
        stop.set()
        thread.join(90)
        assert not thread.is_alive(), "the service did not stop"
