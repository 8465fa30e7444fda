"""The web view's errors: the one it refuses to start with, and the JSON answer of a refused
request (``{"error": "<message>"}``)."""

from __future__ import annotations

import json

from aiohttp import web


class WebSecurityError(ValueError):
    """The web server would be reachable from other machines without a token."""


def json_error(status: type[web.HTTPException], message: str) -> web.HTTPException:
    """An HTTP error whose body is ``{"error": message}``, to raise from a handler."""
    return status(text=json.dumps({"error": message}), content_type="application/json")
