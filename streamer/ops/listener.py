"""An aiohttp application listening on a host and port, watched while the service runs.

Both HTTP servers of the service (the ops endpoints and the web view) listen through a
:class:`Listener`. Its :meth:`keep_serving` is their supervised part (``ops``, ``web``): it
returns only when cancelled, raises when the listening socket has closed under the
service (the supervisor logs it with its traceback and runs it again after a backoff), and
when run again listens again on the same port, so that a scraper or a browser finds the
server where it was. Requests in progress are aiohttp's: a handler that raises answers 500
and the server goes on.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

LOG = logging.getLogger(__name__)

#: How often a running server checks that it still listens.
CHECK_INTERVAL_S = 1.0


class ListenerError(RuntimeError):
    """The listening socket closed while the service runs."""


class Listener:
    def __init__(
        self, app: web.Application, host: str, port: int, what: str, *, shutdown_timeout_s: float
    ) -> None:
        """``what`` names the server in messages (``ops endpoint``, ``live view``)."""
        self.host = host
        self.port = port  # the bound port once listening (port 0: the kernel's choice)
        self.what = what
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout_s)
        self._site: web.TCPSite | None = None
        self._set_up = False

    async def start(self) -> None:
        """Listen; raises ``OSError`` when the port cannot be bound (nothing left running)."""
        if not self._set_up:
            await self._runner.setup()
            self._set_up = True
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except BaseException:
            if self._site is None:  # the first start: nothing else uses the runner
                await self._runner.cleanup()
                self._set_up = False
            raise
        self._site = site
        # aiohttp keeps the bound sockets on the site's private server; port 0 needs them.
        server = site._server  # type: ignore[union-attr]
        sockets = server.sockets if server is not None else []
        if sockets:
            self.port = sockets[0].getsockname()[1]

    @property
    def serving(self) -> bool:
        server = self._site._server if self._site is not None else None  # type: ignore[union-attr]
        return server is not None and server.is_serving()

    async def keep_serving(self) -> None:
        """The server's supervised part (see the module docstring)."""
        if not self.serving:
            if self._site is not None:
                await self._site.stop()
                self._site = None
            await self.start()
            LOG.warning("%s listens again on %s:%s", self.what, self.host, self.port)
        # Polled: asyncio.Server.wait_closed() also waits for open connections (an MJPEG
        # viewer's lasts for hours), and nothing else tells when the socket closes.
        while self.serving:  # noqa: ASYNC110
            await asyncio.sleep(CHECK_INTERVAL_S)
        raise ListenerError(f"the {self.what} stopped listening on {self.host}:{self.port}")

    async def stop(self) -> None:
        """Stop listening and end the requests in progress. Idempotent."""
        if self._set_up:
            await self._runner.cleanup()
            self._set_up = False
        self._site = None
