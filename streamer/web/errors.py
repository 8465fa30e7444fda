"""The web view's errors: the one it refuses to start with, and every refused request's
answer as an RFC 9457 problem (``application/problem+json``: ``type``, ``title``,
``status``, ``detail``), whoever refused it: a handler, the token guard or aiohttp's router
(404, 405)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web

LOG = logging.getLogger(__name__)

PROBLEM = "application/problem+json"
#: Headers of a refusal that its problem answer keeps.
_KEPT_HEADERS = ("WWW-Authenticate", "Retry-After", "Allow")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class WebSecurityError(ValueError):
    """The web server would be reachable from other machines without a token."""


def problem_text(status: int, detail: str, **members: Any) -> str:
    """The JSON of a problem (``members``: extension members, RFC 9457 section 3.2)."""
    title = HTTPStatus(status).phrase
    return json.dumps(
        {"type": "about:blank", "title": title, "status": status, "detail": detail, **members}
    )


def json_error(status: type[web.HTTPException], detail: str, **headers: str) -> web.HTTPException:
    """An HTTP error whose body is a problem saying ``detail``, to raise from a handler."""
    return status(
        text=problem_text(status.status_code, detail), content_type=PROBLEM, headers=headers
    )


@web.middleware
async def problems(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The outermost middleware: a refusal that is not a problem yet becomes one; an error a
    handler did not expect is logged with its traceback and answered 500 (never its text)."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == PROBLEM:
            raise
        detail = exc.text if exc.text and exc.content_type == "text/plain" else exc.reason
        headers = {k: exc.headers[k] for k in _KEPT_HEADERS if k in exc.headers}
        return web.Response(
            status=exc.status,
            text=problem_text(exc.status, detail or exc.reason),
            content_type=PROBLEM,
            headers=headers,
        )
    except ConnectionError:
        raise  # the client went away: nothing to answer
    except Exception:
        LOG.exception("%s %s failed", request.method, request.path)
        return web.Response(
            status=500,
            text=problem_text(500, "the server failed to answer this request (logged)"),
            content_type=PROBLEM,
        )
