"""streamer.foundation.listener: an HTTP server whose listening socket closes is brought back on
the same port by its supervisor, and the crash is logged once with its traceback; malformed
requests are answered 400 and logged once per burst, without tracebacks or their text."""

from __future__ import annotations

import asyncio
import logging
import urllib.request
from typing import Any

from aiohttp import web

from streamer.foundation import listener as listener_module
from streamer.foundation.listener import Listener
from streamer.foundation.supervisor import Supervisor
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
        with caplog.at_level(logging.ERROR, logger="streamer.foundation.supervisor"):
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


MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"GET /api/events?token=s3cret-T0KEN HTTP/9.9\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"GET / HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n",
]


async def _send(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(200), 5)
    finally:
        writer.close()


async def test_malformed_requests_are_one_warning_per_burst_without_tracebacks(
    caplog: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(listener_module._MALFORMED, "burst_s", 1.0)
    monkeypatch.setattr(listener_module._MALFORMED, "_until", float("-inf"))
    app = web.Application()
    app.router.add_get("/", _hello)
    listener = Listener(app, "127.0.0.1", 0, "test server", shutdown_timeout_s=1.0)
    await listener.start()
    try:
        with caplog.at_level(logging.DEBUG):
            for data in MALFORMED * 4:  # 20 malformed requests in a burst
                assert (await _send(listener.port, data)).startswith(b"HTTP/1.")
            assert await asyncio.to_thread(_get, listener.port) == "hello"  # served on
            await asyncio.sleep(1.1)  # the burst is over: the next one is logged again
            answer = await _send(listener.port, MALFORMED[0])
    finally:
        await listener.stop()
    assert answer.split(b"\r\n")[0].endswith(b" 400 Bad Request")
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.name for r in warnings] == ["streamer.foundation.listener"] * 2, warnings
    assert "malformed HTTP request from 127.0.0.1" in warnings[0].getMessage()
    assert "(19 more since the last warning)" in warnings[1].getMessage()
    assert not [r for r in caplog.records if r.exc_info]
    assert not [r for r in caplog.records if "s3cret-T0KEN" in r.getMessage()]
