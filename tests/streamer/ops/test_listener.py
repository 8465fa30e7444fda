"""streamer.ops.listener: an HTTP server whose listening socket closes is brought back on
the same port by its supervisor, and the crash is logged once with its traceback."""

from __future__ import annotations

import asyncio
import logging
import urllib.request
from typing import Any

from aiohttp import web

from streamer.ops.listener import Listener
from streamer.pipeline.supervisor import Supervisor
from tests.log_records import traceback_of
from tests.polling import until


def _get(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
        return response.read().decode()


async def _hello(request: web.Request) -> web.Response:
    return web.Response(text="hello")


async def test_a_server_that_stops_listening_is_listened_again_on_its_port(caplog: Any) -> None:
    app = web.Application()
    app.router.add_get("/", _hello)
    listener = Listener(app, "127.0.0.1", 0, "test server", shutdown_timeout_s=1.0)
    await listener.start()
    port = listener.port
    assert port and await asyncio.to_thread(_get, port) == "hello"
    supervisor = Supervisor(backoff_s=0.1)
    supervisor.start("web", listener.keep_serving)
    await asyncio.sleep(0.3)  # the part watches the socket
    try:
        with caplog.at_level(logging.ERROR, logger="streamer.pipeline.supervisor"):
            # The listening socket closes under the service (what an fd closed by mistake, or
            # an accept loop that died, looks like from here).
            listener._site._server.close()  # type: ignore[union-attr]
            await until(lambda: supervisor.parts["web"].restarts == 1, 10, "the crash seen")
            await until(lambda: listener.serving, 10, "listening again")
        assert listener.port == port
        assert await asyncio.to_thread(_get, port) == "hello"
        crashes = [r for r in caplog.records if "web crashed" in r.getMessage()]
        assert len(crashes) == 1
        assert "ListenerError" in traceback_of(crashes[0])
        assert "stopped listening on 127.0.0.1" in traceback_of(crashes[0])
        assert supervisor.parts["web"].state == "running"
    finally:
        await supervisor.stop()
        await listener.stop()
    assert not listener.serving
