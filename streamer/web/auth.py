"""Who the live view answers: the token or the local Host header, and the headers of every answer.

By default the server listens on 127.0.0.1 only. On any other address it refuses to start
without ``web.token`` (:func:`refuse_exposure`); with a token every route needs
``Authorization: Bearer <token>``, ``?token=<token>`` or the cookie of a login session
(streamer/web/sessions.py), 401 otherwise (a browser asking for a page is sent to
``/login``); the token is compared in constant time and never echoed. The login page and its
script and style are open to all. A signed picture link (streamer/domain/picture_links.py)
opens its one picture without the token. Without a token, requests must name a local host (``Host:
127.0.0.1``, ``localhost``, ``[::1]``), which stops DNS-rebinding pages from reading the API,
and must come straight from a local client: a request that carries a ``Forwarded``,
``X-Forwarded-*`` or ``X-Real-IP`` header came through a reverse proxy, which would open the
whole API to anyone who reaches the proxy (a proxy on the same host sends ``Host:
127.0.0.1`` by default), so it is refused 403, with one WARNING. Behind a proxy, set a
token (docs/production.md, Security). Wrong tokens are limited per client
(streamer/web/auth_limits.py). A POST that changes the service (``/api/reload``) is refused
to a page of another origin (:func:`same_origin`).
"""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode, urlsplit

from aiohttp import web

from streamer.config.service import LOOPBACK_HOSTS
from streamer.domain.picture_links import LinkRefusedError, PictureLinks
from streamer.web.auth_limits import FailureLimiter, client_of
from streamer.web.errors import WebSecurityError

log = logging.getLogger(__name__)

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
            "(e.g. token: ${WEB_TOKEN}) so that the live view, the API and the "
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
#: Headers a reverse proxy adds (RFC 7239 and the de facto ones): a request was relayed.
PROXY_HEADERS = (
    "Forwarded",
    "X-Forwarded-For",
    "X-Forwarded-Host",
    "X-Forwarded-Proto",
    "X-Real-IP",
)
#: Pages a browser is sent to the login page for, rather than answered 401.
PAGES = frozenset({"/", "/events"})
_PICTURE = re.compile(r"^/api/events/[^/]+/(crop|frame)\.jpg$")


def proxied(request: web.Request) -> str | None:
    """The first proxy header ``request`` carries, if any."""
    return next((name for name in PROXY_HEADERS if name in request.headers), None)


def guard(
    token: str | None,
    session_ok: Callable[[web.Request], bool] = lambda request: False,
    links: PictureLinks | None = None,
    limiter: FailureLimiter | None = None,
) -> Middleware:
    """The middleware in front of every route: the token (a Bearer header, ``?token=`` or a
    login session, ``session_ok``) when there is one, else a local Host header on a request
    that no proxy relayed. A picture requested with a signed link (``?expires=&sig=``) is
    answered on the link alone, or refused 403 when the link is not valid or has expired.
    ``limiter``: wrong tokens per client (429 beyond them)."""
    warned_proxy = False

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        nonlocal warned_proxy
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
            header = proxied(request)
            if header is not None:
                if not warned_proxy:
                    warned_proxy = True
                    log.warning(
                        "web: a request came through a proxy (%s header) and this server "
                        "has no web.token: refused 403; behind a proxy, set web.token",
                        header,
                    )
                raise web.HTTPForbidden(
                    text="this server has no token, so it answers direct local requests "
                    f"only; this one came through a proxy ({header} header): set web.token"
                )
        elif not public and not session_ok(request):
            if not _offers_token(request):
                _unauthorized(request)
            client = client_of(request)
            if limiter is not None:
                limiter.refuse(client)  # 429 while this client is over its failures
            if not token_ok(request, token):
                if limiter is not None:
                    limiter.failed(client)
                _unauthorized(request)
        return await handler(request)

    return middleware


def _offers_token(request: web.Request) -> bool:
    """Whether ``request`` offers a token at all (a wrong one is a failure, none is not)."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    bearer = scheme.lower() == "bearer" and bool(value.strip())
    return bearer or bool(request.query.get("token"))


def _unauthorized(request: web.Request) -> None:
    if request.method in ("GET", "HEAD") and request.path in PAGES:
        raise web.HTTPSeeOther(f"/login?{urlencode({'next': request.path_qs})}")
    raise web.HTTPUnauthorized(
        text="a valid token is required: log in, or send Authorization: Bearer <token>",
        headers={"WWW-Authenticate": 'Bearer realm="lpr-streamer"'},
    )


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
