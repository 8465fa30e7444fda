"""Who the live view answers: the token or the local Host header, and the headers of every answer.

By default the server listens on 127.0.0.1 only. On any other address it refuses to start
without ``web.token`` (:func:`refuse_exposure`); with a token every route needs
``Authorization: Bearer <token>`` or ``?token=<token>`` (401 otherwise), compared in constant
time and never echoed. Without a token, requests must name a local host (``Host:
127.0.0.1``, ``localhost``, ``[::1]``), which stops DNS-rebinding pages from reading the API.
A POST that changes the service (``/api/reload``) is refused to a page of another origin
(:func:`same_origin`).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

from streamer.config.service import LOOPBACK_HOSTS
from streamer.web.errors import WebSecurityError

#: A shorter ``web.token`` is accepted, with a warning.
MIN_TOKEN_CHARS = 16

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


def refuse_exposure(host: str, token: str | None) -> None:
    """Raise :class:`WebSecurityError` when listening on ``host`` needs a token and there is
    none."""
    if token is None and host.lower() not in LOOPBACK_HOSTS:
        raise WebSecurityError(
            f"web.host is {host!r}, not 127.0.0.1/::1/localhost: set web.token "
            "(e.g. token: ${LPR_WEB_TOKEN}) so that the live view, the API and the "
            "streams are not open to anyone who can reach that address"
        )


def host_name(host_header: str) -> str:
    """``127.0.0.1:8080`` -> ``127.0.0.1``; ``[::1]:8080`` -> ``::1``."""
    host = host_header.lower()
    if host.startswith("["):
        return host[1 : host.find("]")]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def token_ok(request: web.Request, token: str) -> bool:
    """Whether ``request`` carries ``token`` (Bearer header, else ``?token=``)."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        supplied = value.strip()
    else:
        supplied = request.query.get("token", "")
    return bool(supplied) and hmac.compare_digest(supplied.encode("utf-8"), token.encode("utf-8"))


def guard(token: str | None) -> Middleware:
    """The middleware in front of every route: the token when there is one, else a local
    Host header."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token is None:
            if host_name(request.host) not in LOOPBACK_HOSTS:
                raise web.HTTPForbidden(text="this server answers requests for 127.0.0.1 only")
        elif not token_ok(request, token):
            raise web.HTTPUnauthorized(
                text="a valid token is required: Authorization: Bearer <token>, or ?token=",
                headers={"WWW-Authenticate": 'Bearer realm="lpr-streamer"'},
            )
        return await handler(request)

    return middleware


def same_origin(request: web.Request) -> bool:
    """False when a page of another origin sent ``request`` (the browser names the page's
    origin on every cross-origin POST), so that a page open in the operator's browser cannot
    change the service."""
    origin = request.headers.get("Origin")
    return origin is None or urlsplit(origin).netloc == request.host


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """On every answer (``on_response_prepare``): not cached, not sniffed, no referrer, not
    framed."""
    headers = response.headers
    headers.setdefault("Cache-Control", "no-store")
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("Referrer-Policy", "no-referrer")
    headers.setdefault("X-Frame-Options", "DENY")
