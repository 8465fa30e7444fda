"""The web view's pages, and the scripts and style they load (streamer/web/pages/).

* ``/``: the live view (cameras, their health in words, annotated video, recent events);
* ``/events``: the events page (search, filters, paging, pictures, live updates, CSV);
* ``/login``: the login page (the token exchanged for a session cookie,
  streamer/web/sessions.py);
* ``/static/<file>``: their scripts and style (open to all, like the login page: no data);
  ``/favicon.ico``: 204.

The pages are static: they carry no data and no secret, and read everything from the API.
Their Content-Security-Policy allows scripts, styles and pictures of this origin only; data
is put into the DOM with ``textContent``.
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

from aiohttp import web

from streamer.web.errors import json_error

PAGES_DIR = Path(__file__).with_name("pages")
#: Route -> page file.
PAGES = {"/": "live.html", "/events": "events.html", "/login": "login.html"}
#: The files under /static/ and their types; nothing else is served from the folder.
STATIC = {
    "style.css": "text/css",
    "common.js": "text/javascript",
    "live.js": "text/javascript",
    "events.js": "text/javascript",
    "login.js": "text/javascript",
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "media-src 'self' blob:; connect-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


@functools.cache
def _read(name: str) -> bytes:
    return (PAGES_DIR / name).read_bytes()


async def _file(name: str) -> bytes:
    return await asyncio.to_thread(_read, name)


def add_to(router: web.UrlDispatcher) -> None:
    for path, name in PAGES.items():
        router.add_get(path, functools.partial(_page, name))
    router.add_get("/static/{name}", _static)
    router.add_get("/favicon.ico", _no_icon)  # browsers ask for it; there is none


async def _page(name: str, request: web.Request) -> web.Response:
    return web.Response(
        body=await _file(name),
        content_type="text/html",
        charset="utf-8",
        headers={"Content-Security-Policy": CSP},
    )


async def _no_icon(request: web.Request) -> web.Response:
    return web.Response(status=204, headers={"Cache-Control": "max-age=86400"})


async def _static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    kind = STATIC.get(name)
    if kind is None:
        raise json_error(web.HTTPNotFound, "no such file")
    return web.Response(
        body=await _file(name),
        content_type=kind,
        charset="utf-8",
        headers={"Cache-Control": "no-cache"},
    )
