"""The login page's sessions: the token exchanged once for an HttpOnly cookie.

``GET /api/session`` (open to all) says whether a login is needed and whether this browser
has one. ``POST /api/session`` with ``{"token": "..."}`` (JSON, or the login form's fields) answers
204 and sets ``lpr_session``: a random value, ``HttpOnly`` (no script reads it),
``SameSite=Strict`` (no other site's page sends it), ``Secure`` behind HTTPS, ``Path=/``,
for ``web.session_ttl_s``. ``DELETE /api/session`` ends the session and clears the cookie.

Sessions live in this process (a restart logs everyone out), bounded by
:data:`MAX_SESSIONS` (the oldest is ended first); only a hash of each value is kept, so a
memory dump does not hand one out.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from aiohttp import web
from pydantic import ValidationError

from streamer.web.api_models import Login, SessionState, dump
from streamer.web.auth import same_origin
from streamer.web.auth_limits import FailureLimiter, client_of
from streamer.web.errors import PROBLEM, json_error, problem_text

COOKIE = "lpr_session"
#: Sessions at once; a new one beyond it ends the oldest.
MAX_SESSIONS = 1000
_MAX_BODY = 8192


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()


class Sessions:
    """Open sessions: the hash of each cookie value -> when it expires (monotonic)."""

    def __init__(self, ttl_s: float, max_sessions: int = MAX_SESSIONS) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._expiry: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._expiry)

    def create(self) -> str:
        now = time.monotonic()
        for digest, expiry in list(self._expiry.items()):
            if expiry <= now:
                del self._expiry[digest]
        while len(self._expiry) >= self.max_sessions:  # dicts keep insertion order
            del self._expiry[next(iter(self._expiry))]
        value = secrets.token_urlsafe(32)
        self._expiry[_digest(value)] = now + self.ttl_s
        return value

    def valid(self, value: str | None) -> bool:
        if not value:
            return False
        expiry = self._expiry.get(_digest(value))
        return expiry is not None and expiry > time.monotonic()

    def admits(self, request: web.Request) -> bool:
        """Whether ``request`` carries the cookie of an open session."""
        return self.valid(request.cookies.get(COOKIE))

    def end(self, value: str | None) -> None:
        if value:
            self._expiry.pop(_digest(value), None)


class SessionRoutes:
    """``POST`` and ``DELETE /api/session`` (see the module docstring)."""

    def __init__(
        self, token: str | None, sessions: Sessions, limiter: FailureLimiter | None = None
    ) -> None:
        self.token = token
        self.sessions = sessions
        self.limiter = limiter

    def add_to(self, router: web.UrlDispatcher) -> None:
        router.add_get("/api/session", self.state)
        router.add_post("/api/session", self.login)
        router.add_delete("/api/session", self.logout)

    async def state(self, request: web.Request) -> web.Response:
        session = {
            "login": self.token is not None,
            "authenticated": self.token is None or self.sessions.admits(request),
        }
        return web.json_response(dump(SessionState, session))

    async def login(self, request: web.Request) -> web.Response:
        if self.token is None:
            raise json_error(web.HTTPNotFound, "this server has no token: there is no login")
        if not same_origin(request):  # no page of another site logs the browser in
            raise json_error(web.HTTPForbidden, "a page of another origin may not log in")
        client = client_of(request)
        if self.limiter is not None:
            self.limiter.refuse(client)  # 429 while this client is over its failures
        supplied = await _supplied_token(request)
        # (surrogatepass: JSON may carry a lone surrogate, which plain UTF-8 cannot encode)
        if not hmac.compare_digest(supplied.encode("utf-8", "surrogatepass"), self.token.encode()):
            if self.limiter is not None:
                self.limiter.failed(client)
            raise json_error(web.HTTPUnauthorized, "this is not the token")
        response = web.Response(status=204)
        response.set_cookie(
            COOKIE,
            self.sessions.create(),
            max_age=int(self.sessions.ttl_s),
            path="/",
            httponly=True,
            samesite="Strict",
            secure=_https(request),
        )
        return response

    async def logout(self, request: web.Request) -> web.Response:
        self.sessions.end(request.cookies.get(COOKIE))
        response = web.Response(status=204)
        response.del_cookie(COOKIE, path="/")
        return response


async def _supplied_token(request: web.Request) -> str:
    if request.content_length is not None and request.content_length > _MAX_BODY:
        raise web.HTTPRequestEntityTooLarge(
            max_size=_MAX_BODY,
            actual_size=request.content_length,
            text=problem_text(413, "the login is at most 8 kB"),
            content_type=PROBLEM,
        )
    try:
        if request.content_type == "application/json":
            return Login.model_validate_json(await request.read()).token
        form = await request.post()
        return Login.model_validate({"token": form.get("token")}).token
    except (ValidationError, ValueError):
        raise json_error(web.HTTPBadRequest, 'send {"token": "<the token>"}') from None


def _https(request: web.Request) -> bool:
    """Whether the browser reached this server over HTTPS (itself, or a proxy saying so)."""
    return request.secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https"
