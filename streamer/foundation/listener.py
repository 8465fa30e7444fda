"""An aiohttp application listening on a host and port, watched while the service runs.

Both HTTP servers of the service (the ops endpoints and the web view) listen through a
:class:`Listener`. Its :meth:`keep_serving` is their supervised part (``ops``, ``web``): it
returns only when cancelled, raises when the listening socket has closed under the
service (the supervisor logs it with its traceback and runs it again after a backoff), and
when run again listens again on the same port, so that a scraper or a browser finds the
server where it was. Requests in progress are aiohttp's: a handler that raises answers 500
and the server goes on.

A malformed request (a request line or header HTTP cannot parse: a scanner, a client
speaking another protocol) is answered 400 by aiohttp, which also logs it at ERROR with a
traceback, one per request: a loop of them would fill the log. :class:`MalformedRequests`
turns them into one WARNING per ``MALFORMED_BURST_S``, without the traceback or the request
(which may carry a token), that says how many came, from where and of what kind.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import http_exceptions, web

LOG = logging.getLogger(__name__)

#: How often a running server checks that it still listens.
CHECK_INTERVAL_S = 1.0
#: Malformed requests are logged once per this many seconds.
MALFORMED_BURST_S = 60.0


class MalformedRequests(logging.Filter):
    """On aiohttp's server logger: its ERROR for a request it could not parse becomes one
    WARNING per burst, without a traceback (see the module docstring)."""

    def __init__(self, burst_s: float = MALFORMED_BURST_S) -> None:
        super().__init__()
        self.burst_s = burst_s
        self._until = float("-inf")  # the end of the burst last warned of
        self._since_warned = 0  # malformed requests not logged since that warning

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, http_exceptions.BadHttpMessage):
            return True  # anything else aiohttp logs goes through as it is
        now = time.monotonic()
        if now < self._until:
            self._since_warned += 1
            return False
        more = f" ({self._since_warned} more since the last warning)" if self._since_warned else ""
        # The kind only: the error's text quotes the request, which may carry a token.
        LOG.warning(
            "%s (%s); answered 400%s; the next are logged once per %g s",
            record.getMessage().replace("Error handling request", "malformed HTTP request"),
            type(error).__name__,
            more,
            self.burst_s,
        )
        self._until, self._since_warned = now + self.burst_s, 0
        return False


#: One filter for the process: aiohttp's server logger is shared by both servers.
_MALFORMED = MalformedRequests()
logging.getLogger("aiohttp.server").addFilter(_MALFORMED)


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
