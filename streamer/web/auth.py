"""Who the live view answers: the token or the local Host header, and the headers of every answer.

By default the server listens on 127.0.0.1 only. On any other address it refuses to start
without ``web.token`` (:func:`refuse_exposure`); with a token every route needs
``Authorization: Bearer <token>``, ``?token=<token>`` or the cookie of a login session
(streamer/web/sessions.py), 401 otherwise (a browser asking for a page is sent to
``/login``); the token is compared in constant time and never echoed. The login page and its
script and style are open to all. A signed picture link (streamer/domain/picture_links.py)
opens its one picture without the token. Without a token, requests must name a local host (``Host:
127.0.0.1``, ``localhost``, ``[::1]``), which stops DNS-rebinding pages from reading the API.
A POST that changes the service (``/api/reload``) is refused to a page of another origin
(:func:`same_origin`).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode, urlsplit

from aiohttp import web

from streamer.config.service import LOOPBACK_HOSTS
from streamer.domain.picture_links import LinkRefusedError, PictureLinks
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
    return bool(supplied) and hmac.compare_digest(
        supplied.encode("utf-8", "surrogatepass"), token.encode("utf-8")
    )


#: What anyone may fetch: the login page and what it needs (no data in them), the login.
PUBLIC = frozenset(
    {
        ("GET", "/login"),
        ("HEAD", "/login"),
        ("GET", "/api/session"),
        ("POST", "/api/session"),
        ("GET", "/favicon.ico"),
    }
)
PUBLIC_PREFIX = "/static/"
#: Pages a browser is sent to the login page for, rather than answered 401.
PAGES = frozenset({"/", "/events"})
_PICTURE = re.compile(r"^/api/events/[^/]+/(crop|frame)\.jpg$")


def guard(
    token: str | None,
    session_ok: Callable[[web.Request], bool] = lambda request: False,
    links: PictureLinks | None = None,
) -> Middleware:
    """The middleware in front of every route: the token (a Bearer header, ``?token=`` or a
    login session, ``session_ok``) when there is one, else a local Host header. A picture
    requested with a signed link (``?expires=&sig=``) is answered on the link alone, or
    refused 403 when the link is not valid or has expired."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if "sig" in request.query and _PICTURE.match(request.path):
            if links is None:
                raise web.HTTPForbidden(text="this server gives out no picture links")
            try:
                links.check(
                    request.path, request.query.get("expires", ""), request.query.get("sig", "")
                )
            except LinkRefusedError as exc:
                raise web.HTTPForbidden(text=str(exc)) from None
            return await handler(request)
        public = (request.method, request.path) in PUBLIC or request.path.startswith(PUBLIC_PREFIX)
        if token is None:
            if host_name(request.host) not in LOOPBACK_HOSTS:
                raise web.HTTPForbidden(text="this server answers requests for 127.0.0.1 only")
        elif not public and not token_ok(request, token) and not session_ok(request):
            if request.method in ("GET", "HEAD") and request.path in PAGES:
                raise web.HTTPSeeOther(f"/login?{urlencode({'next': request.path_qs})}")
            raise web.HTTPUnauthorized(
                text="a valid token is required: log in, or send Authorization: Bearer <token>",
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
